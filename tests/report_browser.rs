//! Issue #13: the HTML report rendered in headless Chromium (Debian's `chromium`, which
//! `scripts/browser-test.sh` installs; CI runs it). The screenshot is not blank, every
//! chart is in the page, and every number shown equals the profile's JSON.
//!
//! Ignored by default (it needs the browser): `bash scripts/browser-test.sh`.

use std::collections::HashMap;
use std::process::Command;

use candle_core::Device;
use wick::graph::profiler::{html, LayerLevel, MachinePeaks};
use wick::graph::{Profile, TimeProfiler};
use wick::models::{Depth, ResNetConfig, Session, Stem, WeightInit};

/// A real profile: ResNet-18 (CIFAR stem) trained 4 steps at batch 4, 16x16, verbosity 2.
fn profile() -> Profile {
    let config = ResNetConfig::new(Depth::R18, Stem::Cifar, 10).unwrap();
    let sgd = wick::ops::SgdParams {
        lr: 0.01,
        momentum: 0.9,
        ..Default::default()
    };
    let mut s = Session::training(config, 4, 16, sgd.into(), &Device::Cpu).unwrap();
    s.init_weights(WeightInit::Formula).unwrap();
    s.executor_mut()
        .add_hook(TimeProfiler::new(2, 1).with_memory_counter(Box::new(wick::allocator::Counter)))
        .unwrap();
    let (images, labels) = wick::models::init::formula::batch(4, 16, 10).unwrap();
    for _ in 0..4 {
        s.step(&images, &labels).unwrap();
    }
    let mut p = s.executor().hook::<TimeProfiler>().unwrap().profile();
    p.machine = Some(MachinePeaks::measure(&Device::Cpu).unwrap());
    // What the report shows is what the file holds.
    Profile::from_json(&p.to_json()).unwrap()
}

/// `data-key` -> (data-value, shown text) of every number in the rendered page.
fn numbers(dom: &str) -> HashMap<String, (f64, String)> {
    let mut out = HashMap::new();
    for part in dom.split("data-key=\"").skip(1) {
        let key = part.split('"').next().unwrap().replace("&amp;", "&");
        let value = part
            .split("data-value=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let shown = part.split('>').nth(1).unwrap().split('<').next().unwrap();
        out.insert(key, (value.parse().unwrap(), shown.to_string()));
    }
    out
}

#[test]
#[ignore = "needs Debian's chromium: bash scripts/browser-test.sh"]
fn the_report_renders_in_chromium_with_every_chart_and_the_json_numbers() {
    let p = profile();
    let dir = tempfile::Builder::new()
        .prefix("wick-report-")
        .tempdir()
        .unwrap();
    let page = dir.path().join("report.html");
    std::fs::write(&page, html::report(&p, None)).unwrap();
    let url = format!("file://{}", page.display());
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1000,2600",
    ];
    let shot = dir.path().join("shot.png");
    let status = Command::new(&chromium)
        .args(flags)
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .unwrap_or_else(|e| panic!("running {chromium}: {e}"));
    assert!(
        shot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    // Not blank: a good share of the pixels are not the background.
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let background = &pixels[..px];
    let drawn = pixels.chunks(px).filter(|c| *c != background).count();
    let share = drawn as f64 / (pixels.len() / px) as f64;
    assert!(
        share > 0.02,
        "the screenshot is nearly blank ({:.2}% drawn)",
        100.0 * share
    );
    let colors: std::collections::HashSet<&[u8]> = pixels.chunks(px).collect();
    assert!(
        colors.len() > 20,
        "only {} colours: the charts did not render",
        colors.len()
    );

    let dom = Command::new(&chromium)
        .args(flags)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap();
    let dom = String::from_utf8(dom.stdout).unwrap();
    for id in [
        "step-breakdown",
        "op-types",
        "op-type-table",
        "layers",
        "memory",
        "memory-peak",
        "roofline",
        "recommendations",
    ] {
        assert!(
            dom.contains(&format!("id=\"{id}\"")),
            "chart {id} missing from the rendered page"
        );
    }
    assert!(
        dom.matches("class=\"op-point\"").count() >= 5,
        "roofline points"
    );

    // Every number shown is the JSON's: the data-value exactly, the text to its digits.
    let shown = numbers(&dom);
    let mut expected: Vec<(String, f64)> = vec![
        ("iteration_sec".into(), p.iteration_sec),
        ("forward_sec".into(), p.forward_sec),
        ("backward_sec".into(), p.backward_sec),
        ("optimizer_sec".into(), p.optimizer_sec),
        ("step.wall_sec".into(), p.step.unwrap().wall_sec),
    ];
    expected.extend(
        p.by_type()
            .iter()
            .map(|r| (format!("op_type.{}", r.name), r.total_sec)),
    );
    expected.extend(
        p.by_layer(LayerLevel::Layer)
            .iter()
            .take(20)
            .map(|r| (format!("layer.{}.total", r.name), r.total_sec)),
    );
    for (key, value) in &expected {
        let (data, text) = shown.get(key).unwrap_or_else(|| panic!("{key} not shown"));
        assert_eq!(data, value, "{key}: data-value");
        let ms: f64 = text.trim_end_matches(" ms").parse().unwrap();
        assert!(
            (ms - value * 1e3).abs() <= 0.0005 + 1e-9,
            "{key}: shows {text}, JSON {value}"
        );
    }
    let peak = p.memory.unwrap().predicted_peak_bytes as f64;
    assert_eq!(shown["memory.predicted_peak_bytes"].0, peak);
    assert_eq!(
        shown["machine.flops_per_sec"].0,
        p.machine.unwrap().flops_per_sec
    );
    println!(
        "{} numbers checked against the JSON; {:.1}% of the screenshot drawn",
        expected.len() + 2,
        100.0 * share
    );
}
