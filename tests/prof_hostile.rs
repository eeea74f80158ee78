//! Issue #31: `wick-prof` on hostile input. Options out of range or NaN are refused
//! naming the flag; profiles with negative or NaN times, or samples of the wrong shape,
//! are refused naming the field; names with terminal escape sequences are printed
//! escaped. Every case ends in bounded time with exit status 2 (or 0/1 for a diff).

mod common;

use std::time::{Duration, Instant};

use common::{assert_fails, relu_softmax_profile, wick_prof};

#[test]
fn hostile_options_and_profiles_are_refused_naming_the_flag_or_field() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let good = relu_softmax_profile(64, 5);
    std::fs::write(p.join("a.json"), good.to_string()).unwrap();
    std::fs::write(p.join("b.json"), good.to_string()).unwrap();
    let mut cases = 0;
    let options: [(&[&str], &str); 8] = [
        (&["--confidence", "0.99999"], "--confidence 0.99999"),
        (&["--confidence", "0.9999999999999999"], "--confidence"),
        (&["--confidence", "nan"], "--confidence NaN"),
        (&["--confidence", "0"], "--confidence 0"),
        (&["--min-share", "nan"], "--min-share NaN"),
        (&["--min-share=-1"], "--min-share -1"),
        (&["--threshold", "nan"], "--threshold NaN"),
        (&["--threshold", "inf"], "--threshold inf"),
    ];
    for (args, needle) in options {
        let started = Instant::now();
        let mut all = vec!["diff", "a.json", "b.json"];
        all.extend_from_slice(args);
        let out = wick_prof(p, &all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(needle) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?}: unbounded"
        );
        cases += 1;
    }
    type Break = fn(&mut serde_json::Value);
    let files: [(Break, &str); 14] = [
        (
            |v| v["iteration_sec"] = 1e308.into(),
            "iteration_sec is 100000000000000000000",
        ),
        (
            |v| v["timed_iterations"] = 0.into(),
            "timed_iterations is 0",
        ),
        (
            |v| v["machine"] = serde_json::json!({"flops_per_sec": 0.0, "bytes_per_sec": 1e10}),
            "machine.flops_per_sec is 0",
        ),
        (
            |v| v["machine"] = serde_json::json!({"flops_per_sec": 1e11, "bytes_per_sec": -5.0}),
            "machine.bytes_per_sec is -5",
        ),
        (
            |v| {
                v["machine"] = serde_json::json!({"flops_per_sec": 1e11, "bytes_per_sec": 1e10,
                    "flops_range": [2e11, 1e11]})
            },
            "its slowest run is above its fastest",
        ),
        (
            |v| v["iteration_sec"] = (-1.0).into(),
            "iteration_sec is -1",
        ),
        (
            |v| {
                v["input_pipeline"] = serde_json::json!({"threads": [{"thread": 0, "batches": 2,
                    "images": 8, "skipped": 0, "read_sec": 0.1, "decode_sec": -1.0,
                    "augment_sec": 0.1, "collate_sec": 0.0}]})
            },
            "input_pipeline.threads[0].decode_sec is -1",
        ),
        (
            |v| {
                v["input_pipeline"] = serde_json::json!({"threads": [{"thread": 0, "batches": 0,
                    "images": 0, "skipped": 0, "read_sec": 0.1, "decode_sec": 1.0,
                    "augment_sec": 0.1, "collate_sec": 0.0}]})
            },
            "input_pipeline.threads[0] has 0 batches",
        ),
        (
            |v| v["ops"][1]["mean_sec"] = (-0.001).into(),
            "ops[1] (OP_ID1 SoftmaxForward).mean_sec is -0.001",
        ),
        (
            |v| v["samples"]["iterations"][2] = (-3.0).into(),
            "samples.iterations[2] is -3",
        ),
        (
            |v| {
                v["samples"]["iterations"].as_array_mut().unwrap().pop();
            },
            "samples.iterations has 3 values for 4 timed iterations",
        ),
        (
            |v| {
                v["samples"]["ops"][0].as_array_mut().unwrap().pop();
            },
            "samples.ops[0] has 1 values for 2 ops",
        ),
        (
            |v| {
                v["samples"]["phases"].as_array_mut().unwrap().truncate(1);
            },
            "samples.phases has 1 rows for 4 timed iterations",
        ),
        (
            |v| v["samples"]["iterations"] = serde_json::json!([]),
            "samples.iterations has 0 values",
        ),
    ];
    for (break_it, needle) in files {
        let mut v = good.clone();
        break_it(&mut v);
        std::fs::write(p.join("bad.json"), v.to_string()).unwrap();
        for args in [["diff", "a.json", "bad.json"], ["report", "bad.json", "-o"]] {
            let mut all: Vec<&str> = args.to_vec();
            if all[0] == "report" {
                all.push("r.html");
            }
            let out = wick_prof(p, &all);
            assert_fails(&out, 2, &["bad.json", needle], needle);
            assert!(
                !p.join("r.html").exists(),
                "a report of a bad profile was written"
            );
            cases += 1;
        }
    }
    // Escape sequences in kernel and layer names are printed escaped, by predict too.
    let mut v = good.clone();
    v["ops"][0]["name"] = "ReLU\u{1b}[2J\u{7}".into();
    std::fs::write(p.join("esc-predict.json"), v.to_string()).unwrap();
    let out = wick_prof(p, &["predict", "esc-predict.json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !text.contains('\u{1b}') && text.contains("ReLU\\u{1b}[2J"),
        "{text:?}"
    );
    cases += 1;
    // Escape sequences in kernel and layer names are printed escaped.
    let mut v = good.clone();
    v["ops"][0]["name"] = "ReLU\u{1b}[2J\u{7}".into();
    v["ops"][0]["origin"]["layer"] = "act\u{1b}]0;owned\u{7}".into();
    std::fs::write(p.join("esc.json"), v.to_string()).unwrap();
    let out = wick_prof(p, &["diff", "esc.json", "esc.json", "--min-share", "0"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(text.contains("ReLU\\u{1b}[2J\\u{7}"), "{text}");
    cases += 1;
    println!("wick-prof on hostile input: {cases} cases, all refused or escaped");
}
