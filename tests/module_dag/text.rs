//! Reading Rust source as the check needs it: comments, literals and test items blanked,
//! `use` trees expanded.

use crate::graph::ModPath;

/// item removed (the code after it stays).
pub fn code_only(text: &str) -> String {
    without_test_items(&blank_comments_and_literals(text))
}

/// Removes each `#[cfg(test)]` attribute and the item it marks: up to its first `;`, or
/// through the braces it opens (a test module), whichever comes first.
pub fn without_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let end = match item.find(['{', ';']) {
            Some(i) if item.as_bytes()[i] == b'{' => {
                let mut depth = 0;
                let mut close = item.len();
                for (j, c) in item.char_indices().skip(i) {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                close = j + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                close
            }
            Some(i) => i + 1,
            None => item.len(),
        };
        out.push(' ');
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Source text with comments, string and char literals blanked.
pub fn blank_comments_and_literals(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) {
            let mut j = i + 1;
            while b.get(j) == Some(&b'#') {
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let mut end = j + 1;
            while end < b.len() {
                if b[end] == b'"'
                    && b[end + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == b'#')
                        .count()
                        == hashes
                {
                    break;
                }
                end += 1;
            }
            i = end + 1 + hashes;
            out.push_str("\"\"");
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' && (b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\')) {
            // A char literal ('x' or an escape); a lifetime has no closing quote.
            i += 2;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

pub fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Tokens of a `use` tree: identifiers, `::`, `{`, `}`, `,`, `*`, `as`.
pub fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_ident(c) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".into());
            i += 2;
        } else {
            if "{},*".contains(c) {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

/// Expands a `use` tree into (path, name it binds) pairs.
pub fn expand(
    toks: &[String],
    pos: &mut usize,
    prefix: &ModPath,
    out: &mut Vec<(ModPath, String)>,
) {
    let mut path = prefix.clone();
    while *pos < toks.len() {
        let t = toks[*pos].as_str();
        match t {
            "::" => *pos += 1,
            "{" => {
                *pos += 1;
                while *pos < toks.len() && toks[*pos] != "}" {
                    expand(toks, pos, &path, out);
                    if *pos < toks.len() && toks[*pos] == "," {
                        *pos += 1;
                    }
                }
                *pos += 1;
                return;
            }
            "," | "}" => break,
            "*" => {
                *pos += 1;
                out.push((path.clone(), "*".into()));
                return;
            }
            "as" => {
                let alias = toks[*pos + 1].clone();
                *pos += 2;
                out.push((path.clone(), alias));
                return;
            }
            _ => {
                path.push(t.to_string());
                *pos += 1;
            }
        }
    }
    if path.len() > prefix.len() {
        let name = path.last().unwrap().clone();
        out.push((path, name));
    }
}
