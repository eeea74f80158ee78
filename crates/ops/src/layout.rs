//! Shape inference for the ops that move data without arithmetic: concatenation, its
//! inverse (a slice per input), permutation and reshape.

use crate::error::{OpError, Result};

/// The shape of the concatenation of `shapes` along `dim`: every other dimension must agree.
pub fn concat_shape(shapes: &[&[usize]], dim: usize) -> Result<Vec<usize>> {
    const OP: &str = "concat";
    let Some(first) = shapes.first() else {
        return Err(OpError::invalid(OP, "nothing to concatenate"));
    };
    if dim >= first.len() {
        return Err(crate::invalid!(
            OP,
            "dimension {dim} is out of range for shape {first:?}"
        ));
    }
    let mut out = first.to_vec();
    for (i, s) in shapes.iter().enumerate().skip(1) {
        let agrees = s.len() == first.len()
            && s.iter()
                .zip(first.iter())
                .enumerate()
                .all(|(d, (a, b))| d == dim || a == b);
        if !agrees {
            return Err(crate::invalid!(OP, "input {i} has shape {s:?}, which does not match input 0's {first:?} outside dimension {dim}"));
        }
        out[dim] += s[dim];
    }
    Ok(out)
}

/// The shape of `shape` permuted by `dims` (a permutation of `0..rank`).
pub fn permute_shape(shape: &[usize], dims: &[usize]) -> Result<Vec<usize>> {
    let mut seen = vec![false; shape.len()];
    let valid = dims.len() == shape.len()
        && dims
            .iter()
            .all(|&d| d < shape.len() && !std::mem::replace(&mut seen[d], true));
    if !valid {
        return Err(crate::invalid!(
            "permute",
            "{dims:?} is not a permutation of the dimensions of {shape:?}"
        ));
    }
    Ok(dims.iter().map(|&d| shape[d]).collect())
}

/// The inverse of permutation `dims`.
pub fn inverse_permutation(dims: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; dims.len()];
    for (i, &d) in dims.iter().enumerate() {
        inv[d] = i;
    }
    inv
}

/// Checks that `to` holds as many elements as `from`.
pub fn check_reshape(from: &[usize], to: &[usize]) -> Result<()> {
    let (a, b) = (from.iter().product::<usize>(), to.iter().product::<usize>());
    if a != b {
        return Err(crate::invalid!(
            "reshape",
            "cannot reshape {from:?} ({a} elements) to {to:?} ({b} elements)"
        ));
    }
    Ok(())
}
