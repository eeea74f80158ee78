//! Choosing the device an example runs on, with a clear error instead of a panic.

use candle_core::Device;

/// The device named `name` (`cpu` or `cuda`, optionally `cuda:N`). Without the `cuda`
/// feature, or without a working CUDA driver and GPU, asking for CUDA is an error that
/// says so (cudarc panics when the driver library is missing; that panic is caught here).
pub fn select(name: &str) -> Result<Device, String> {
    match name {
        "cpu" => Ok(Device::Cpu),
        n if n == "cuda" || n.starts_with("cuda:") => {
            let ordinal: usize = match n.strip_prefix("cuda:") {
                None => 0,
                Some(i) => i
                    .parse()
                    .map_err(|_| format!("bad CUDA device `{n}`: expected cuda or cuda:N"))?,
            };
            cuda(ordinal)
        }
        other => Err(format!("unknown device `{other}`: expected cpu or cuda")),
    }
}

#[cfg(feature = "cuda")]
fn cuda(ordinal: usize) -> Result<Device, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let made = std::panic::catch_unwind(|| Device::new_cuda(ordinal));
    std::panic::set_hook(hook);
    match made {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(e)) => Err(format!("no usable CUDA device {ordinal}: {e}")),
        Err(_) => Err(format!(
            "no usable CUDA device {ordinal}: the CUDA driver library (libcuda.so) could not be loaded; is an NVIDIA driver installed?"
        )),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(_ordinal: usize) -> Result<Device, String> {
    Err(
        "this build of wick has no CUDA support: rebuild with `--features cuda` (or `cudnn`)"
            .into(),
    )
}
