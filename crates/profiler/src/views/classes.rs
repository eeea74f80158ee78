//! The per-class table: the step's op time by kind of work (convolution, linear, matmul,
//! attention, layer norm, softmax, element-wise...), from [`Profile::by_class`].

use std::fmt::Write as _;

use crate::profile::data::Profile;

/// Kernel names listed per class; the rest are counted.
const NAMED_KERNELS: usize = 3;

impl Profile {
    /// The per-class table as text, with a header that defines every column.
    pub fn class_table(&self) -> String {
        let rows = self.by_class();
        let mut s = String::from(
            "Per-class summary (what kind of work the ops do). Nodes: per iteration; Total: ms per iteration; \
             Share: of all op time; GFLOP/s and GB/s: FLOPs and bytes moved / Total; Kernels: its op types, longest first.\n",
        );
        let _ = writeln!(
            s,
            "{:<18} {:>6} {:>11} {:>7} {:>9} {:>9}  Kernels",
            "Class", "Nodes", "Total(ms)", "Share", "GFLOP/s", "GB/s"
        );
        for r in &rows {
            let mut kernels: Vec<String> = r
                .kernels
                .iter()
                .take(NAMED_KERNELS)
                .map(|(name, _)| name.clone())
                .collect();
            if r.kernels.len() > NAMED_KERNELS {
                kernels.push(format!("{} more", r.kernels.len() - NAMED_KERNELS));
            }
            let _ = writeln!(
                s,
                "{:<18} {:>6} {:>11.3} {:>6.1}% {:>9.1} {:>9.1}  {}",
                r.class.name(),
                r.nodes,
                r.total_sec * 1e3,
                r.share * 100.0,
                r.gflops(),
                r.gbytes_per_sec(),
                kernels.join(", ")
            );
        }
        s
    }
}

/// The report's class section (per-op profiles), after a blank line.
pub(crate) fn section(p: &Profile) -> String {
    if !p.shows_per_op() {
        String::new()
    } else {
        format!("\n{}", p.class_table())
    }
}

#[cfg(test)]
mod tests {
    use wick_ops::tensor::TensorKernel;
    use wick_ops::{Kernel, KernelClass};

    use crate::profile::data::{OpProfile, Profile};

    #[test]
    fn a_transformer_step_is_grouped_into_matmul_attention_layer_norm_and_softmax() {
        let op = |kernel: Kernel, sec: f64| OpProfile {
            flops: 1_000_000,
            bytes: 4_000,
            ..OpProfile::new(kernel, sec)
        };
        let ops = vec![
            op(Kernel::Tensor(TensorKernel::MatMul), 0.004),
            op(Kernel::Tensor(TensorKernel::MatMulBackward), 0.008),
            op(Kernel::AttentionForward, 0.002),
            op(Kernel::LayerNormForward, 0.001),
            op(Kernel::LayerNormBackward, 0.001),
            op(Kernel::Tensor(TensorKernel::LogSoftmaxForward), 0.0005),
            op(Kernel::SoftmaxForward, 0.0005),
            op(Kernel::BatchNormBackward, 0.003),
        ];
        let p = Profile {
            ops,
            ..Default::default()
        };
        let rows = p.by_class();
        let classes: Vec<KernelClass> = rows.iter().map(|r| r.class).collect();
        use KernelClass as C;
        assert_eq!(
            classes,
            [
                C::MatMul,
                C::Normalization,
                C::Attention,
                C::LayerNorm,
                C::Softmax
            ]
        );
        assert_eq!(rows[0].nodes, 2);
        assert!((rows[0].share - 0.6).abs() < 1e-12, "{}", rows[0].share);
        assert_eq!(rows[0].kernels[0].0, "MatMulBackward");
        assert!((rows[0].gflops() - 2e6 / 0.012 / 1e9).abs() < 1e-9);
        let text = p.class_table();
        let matmul = text.lines().find(|l| l.starts_with("matmul")).unwrap();
        assert!(matmul.contains("60.0%"), "{matmul}");
        assert!(
            matmul.ends_with("MatMulBackward, MatMulForward"),
            "{matmul}"
        );
        assert!(text.contains("layer norm"), "{text}");
        assert!(text.contains("LogSoftmaxForward, SoftmaxForward"), "{text}");
    }
}
