//! The CPU's two mixed-precision rules, as `(figure, advice)` for the `precision`
//! recommendation: try bf16 autocast where the CPU has bf16 instructions and the step is
//! mostly f32 products; drop a 16-bit policy where the CPU has no instructions for it,
//! since there it only rounds.

use wick_ops::KernelClass;

use crate::profile::data::Profile;

/// On a CPU with bf16 instructions, the products' (convolutions, linear layers,
/// matmuls, attention) share of an all-f32 step's op time from which bf16 autocast pays:
/// `vdpbf16ps` does twice a float32 FMA's work, so a step mostly in products gains.
pub const CPU_PRODUCTS_SHARE: f64 = 0.50;

/// On a CPU without instructions for its 16-bit dtype, the 16-bit ops' share of op time
/// from which the policy is worth naming: it costs its casts and widened operand copies
/// (a few percent of those ops) and gains nothing, so below a tenth of the step it
/// hardly moves it either way.
pub const CPU_LOW_PRECISION_SHARE: f64 = 0.10;

impl Profile {
    /// The CPU's mixed-precision rule, for an all-f32 step (the caller's test): mostly
    /// products, on a CPU with bf16 instructions.
    pub(super) fn cpu_precision_rule(&self, op_time: f64) -> Option<(String, String)> {
        use KernelClass as C;
        if !self.device.starts_with("Cpu") || !self.run.cpu_bf16 {
            return None;
        }
        let products: f64 = self
            .ops
            .iter()
            .filter(|o| {
                matches!(
                    o.class,
                    C::Convolution | C::Linear | C::MatMul | C::Attention
                )
            })
            .map(|o| o.mean_sec)
            .sum();
        let share = products / op_time;
        (share >= CPU_PRODUCTS_SHARE).then(|| (
            format!(
                "{:.1}% of op time is f32 products (convolutions, linear layers, matmuls) on a CPU with avx512_bf16",
                100.0 * share
            ),
            "try bf16 autocast (--precision bf16; GraphBuilder::set_precision): bf16 products with f32 sums run on vdpbf16ps, twice an f32 FMA's work per instruction, with f32 weights and checkpoints".into(),
        ))
    }

    /// Its converse: a 16-bit policy on a CPU that has no instructions for it. bf16
    /// products without `avx512_bf16`, and f16 ones on any CPU, run as f32 products of the
    /// rounded values (exact in f32): the same work as f32, plus the casts, and rounding.
    pub(super) fn cpu_low_precision_rule(&self, op_time: f64) -> Option<(String, String)> {
        if !self.device.starts_with("Cpu") {
            return None;
        }
        let unaccelerated = |dtype: &str| dtype == "F16" || (dtype == "BF16" && !self.run.cpu_bf16);
        let mut low: Option<&str> = None;
        let mut low_sec = 0.0;
        for o in self.ops.iter().filter(|o| unaccelerated(&o.dtype)) {
            low.get_or_insert(&o.dtype);
            low_sec += o.mean_sec;
        }
        let dtype = low?;
        let share = low_sec / op_time;
        let (figure, better) = if dtype == "BF16" {
            (
                "on a CPU without avx512_bf16",
                "keep bf16 for a CPU with avx512_bf16 (AMD Zen 4 and Zen 5, Intel Cooper Lake and Sapphire Rapids) or a GPU",
            )
        } else {
            (
                "on a CPU (wick's CPU kernels have no f16 products)",
                "keep f16 for GPUs' tensor cores, and bf16 for CPUs with avx512_bf16",
            )
        };
        (share >= CPU_LOW_PRECISION_SHARE).then(|| (
            format!("{:.1}% of op time runs in {dtype} {figure}", 100.0 * share),
            format!(
                "use --precision f32 here: these ops multiply the {dtype}-rounded values as f32 products, the same work as f32 plus the casts, so the policy only rounds; {better}"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use wick_ops::Kernel;

    use crate::views::test_profiles::{conv_and_relu, op};

    #[test]
    fn a_16_bit_policy_on_a_cpu_without_its_instructions_is_named_with_its_share() {
        let rules = |p: &crate::profile::data::Profile| {
            let fired = p.recommendations();
            fired.iter().find(|r| r.rule == "precision").cloned()
        };
        // A bf16 step: the conv's 0.8 s of 1.0 in BF16.
        let mut p = conv_and_relu((0.8, 90.0, 1_000_000_000), (0.2, 800_000_000));
        p.ops[0].dtype = "BF16".into();
        let r = rules(&p).expect("bf16 without avx512_bf16 fires");
        assert!(
            r.figure
                .contains("80.0% of op time runs in BF16 on a CPU without avx512_bf16"),
            "{}",
            r.figure
        );
        assert!(r.advice.contains("--precision f32"), "{}", r.advice);
        p.run.cpu_bf16 = true;
        assert_eq!(rules(&p), None, "with avx512_bf16: silent");
        // f16 rounds on every CPU.
        p.ops[0].dtype = "F16".into();
        let r = rules(&p).expect("f16 on a CPU fires");
        assert!(
            r.figure.contains("80.0% of op time runs in F16 on a CPU"),
            "{}",
            r.figure
        );
        assert!(r.advice.contains("GPUs"), "{}", r.advice);
        // Below a tenth of op time, and off the CPU: silent.
        p.ops[0].mean_sec = 0.01;
        p.ops.push(op(Kernel::BatchNormForwardTraining, 0.5, 1, 1));
        assert_eq!(rules(&p), None, "1.4% of op time: silent");
        p.ops[0].mean_sec = 0.8;
        p.device = "Cuda { gpu_id: 0 }".into();
        assert!(
            rules(&p).is_none_or(|r| !r.figure.contains("F16")),
            "on a GPU: silent"
        );
    }
}
