//! The memory lines: the predicted peak and its split, the measured peaks, the
//! prediction's error per category, and what fused attention saves against the unfused
//! graph.

use wick_ops::{Kernel, KernelClass};

use crate::profile::data::Profile;
use crate::profile::memory::MemoryProfile;

/// The report's memory section: the lines of the profile's memory, then attention's.
pub(crate) fn section(p: &Profile) -> String {
    let mut out = p.memory.as_ref().map(|m| m.lines()).unwrap_or_default();
    if let Some(line) = attention_line(p) {
        out.push_str(&line);
    }
    out
}

/// Bytes per element of a dtype as the profile names it (`F32`, `BF16`, ...: candle's
/// `DType` in `Debug` form); 4 for a name candle does not know.
fn dtype_bytes(dtype: &str) -> u64 {
    dtype
        .to_lowercase()
        .parse::<candle_core::DType>()
        .map_or(4, |d| d.size_in_bytes() as u64)
}

/// Bytes per element `op` stores: its bytes moved over the elements it reads and writes,
/// as the nearest of 2, 4 and 8, or its dtype's size when it moved none. Its dtype is the
/// one it computes in, which can be narrower: autocast's attention multiplies in bf16 and
/// keeps f32 values.
fn stored_element_bytes(op: &crate::profile::data::OpProfile) -> u64 {
    let elements: u64 = op
        .input_shapes
        .iter()
        .chain(&op.output_shapes)
        .map(|s| s.iter().map(|&d| d as u64).product::<u64>())
        .sum();
    if elements == 0 || op.bytes == 0 {
        return dtype_bytes(&op.dtype);
    }
    let average = op.bytes as f64 / elements as f64;
    [2u64, 4, 8]
        .into_iter()
        .min_by(|a, b| {
            (*a as f64 - average)
                .abs()
                .total_cmp(&(*b as f64 - average).abs())
        })
        .unwrap_or(4)
}

/// What the fused attention nodes keep for their backward (the output, kept anyway as
/// the next layer's input, and one log-sum-exp per query row), against the `[N, H, L, S]`
/// probabilities an unfused graph (matmul, softmax, matmul) would keep: `None` without
/// attention in the forward pass.
pub fn attention_line(p: &Profile) -> Option<String> {
    let forward = Kernel::AttentionForward.name(wick_ops::DeviceKind::Cpu);
    let (mut nodes, mut fused, mut unfused) = (0usize, 0u64, 0u64);
    for op in p
        .ops
        .iter()
        .filter(|o| o.class == KernelClass::Attention && o.name == forward)
    {
        let (Some(q), Some(k)) = (op.input_shapes.first(), op.input_shapes.get(1)) else {
            continue;
        };
        if q.len() < 2 || k.len() < 2 {
            continue;
        }
        // q [.., L, E] and k [.., S, E]: one statistic per query row, S probabilities each.
        let s = k[k.len() - 2];
        let rows: u64 = q[..q.len() - 1].iter().map(|&d| d as u64).product();
        let size = stored_element_bytes(op);
        nodes += 1;
        fused += rows * size;
        unfused += rows * s as u64 * size;
    }
    if nodes == 0 {
        return None;
    }
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    Some(format!(
        "Attention memory : {nodes} fused attention nodes keep {:.2} MiB for backward beyond their inputs and output (one log-sum-exp per query row); \
         an unfused graph (matmul, softmax, matmul) would keep the [N, H, L, S] probabilities, {:.1} MiB ({:.0}x; more with dropout, which keeps a mask and a dropped copy)\n",
        mib(fused),
        mib(unfused),
        unfused as f64 / fused.max(1) as f64
    ))
}

impl MemoryProfile {
    /// The report's lines.
    pub fn lines(&self) -> String {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let s = &self.split;
        let at = match (self.peak_op, &self.peak_kernel) {
            (Some(op), Some(k)) => format!(" after OP_ID{op} ({k})"),
            _ => String::new(),
        };
        // Parts the graph cannot have (gradients in an inference graph) are left out.
        let parts: Vec<String> = [
            ("parameters", s.parameters),
            ("gradients", s.gradients),
            ("optimizer state", s.optimizer_state),
            ("saved for backward", s.saved_for_backward),
            ("transient", s.transient),
            ("inputs", s.inputs),
            ("running statistics", s.statistics),
            ("pass products (folded weights)", s.pass_products),
            ("kernel workspace", s.kernel_workspace),
        ]
        .iter()
        .filter(|(name, bytes)| *bytes > 0 || *name == "parameters")
        .map(|(name, bytes)| format!("{name} {:.1}", mib(*bytes)))
        .collect();
        let mut out = format!(
            "Memory (predicted from the graph) : peak {:.1} MiB{at} = {} MiB\n",
            mib(self.predicted_peak_bytes),
            parts.join(" + ")
        );
        let measured = match self.measured_peak_bytes {
            Some(m) => {
                let diff = m as f64 - self.predicted_peak_bytes as f64;
                format!(
                    "counting allocator peak {:.1} MiB over the timed iterations ({:+.1} MiB from the prediction; split below when measured per op)",
                    mib(m),
                    diff / (1u64 << 20) as f64
                )
            }
            None => "no counting allocator attached".to_string(),
        };
        let rss = match (self.peak_rss_bytes, self.process_peak_rss_bytes) {
            (Some(r), Some(p)) if p > r => format!(
                "; peak RSS {:.1} MiB when the profile was taken, {:.1} MiB for the whole process (the roofline probe's copy buffers ran after: {:+.1} MiB)",
                mib(r),
                mib(p),
                mib(p) - mib(r)
            ),
            (Some(r), _) => format!("; peak RSS {:.1} MiB (the whole process)", mib(r)),
            (None, _) => String::new(),
        };
        let device = match self.device_used_bytes {
            Some(d) => format!(
                "; the device reports {:.1} MiB in use (every process)",
                mib(d)
            ),
            None => String::new(),
        };
        out.push_str(&format!("Memory (measured) : {measured}{rss}{device}\n"));
        let categories = self.categories();
        if !categories.is_empty() {
            out.push_str("Memory prediction against measurement (MiB; measured by the counting allocator in the last timed iteration):\n");
            for c in &categories {
                out.push_str(&format!(
                    "  {}: predicted {:.1}, measured {:.1}, error {:+.1}\n",
                    c.name,
                    mib(c.predicted),
                    mib(c.measured),
                    mib(c.measured) - mib(c.predicted)
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use wick_ops::Kernel;

    use super::attention_line;
    use crate::profile::data::{OpProfile, Profile};

    #[test]
    fn fused_attention_keeps_a_row_statistic_where_the_unfused_graph_keeps_probabilities() {
        let mut p = Profile::default();
        assert!(attention_line(&p).is_none());
        // Two layers of [N 2, H 4, L 256, E 32] self-attention, in f32.
        let shapes = vec![vec![2, 4, 256, 32]; 3];
        let attention = OpProfile {
            input_shapes: shapes,
            ..OpProfile::new(Kernel::AttentionForward, 0.001)
        };
        p.ops = vec![
            attention.clone(),
            attention,
            OpProfile::new(Kernel::AttentionBackward, 0.002),
        ];
        let line = attention_line(&p).unwrap();
        // 2 x 2·4·256 rows x 4 bytes = 16 KiB against 2 x 2·4·256·256 x 4 = 4 MiB.
        assert!(
            line.starts_with("Attention memory : 2 fused attention nodes keep 0.02 MiB"),
            "{line}"
        );
        assert!(line.contains("probabilities, 4.0 MiB (256x"), "{line}");
        // Under autocast it computes in bf16 but stores f32 (its bytes say so): the same
        // memory; a bf16 graph's attention, which moves half the bytes, keeps half.
        let elements = 3 * 2 * 4 * 256 * 32;
        for (bytes, want) in [(4 * elements, "0.02 MiB"), (2 * elements, "0.01 MiB")] {
            for op in &mut p.ops[..2] {
                op.dtype = "BF16".into();
                op.bytes = bytes;
            }
            let line = attention_line(&p).unwrap();
            assert!(line.contains(want), "{bytes} bytes: {line}");
        }
    }
}
