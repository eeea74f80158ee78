//! A user's own op through the public API only: a custom `NodeOp` with its own kernel
//! name, a backward rule recording a second custom op, timed and named by the profiler
//! like a built-in op, and a broken promise (wrong output shape) reported by name.

mod common;

use candle_core::{DType, Device, Tensor};
use common::assert_mentions;
use wick_graph::{
    arg, args, one, BackwardCtx, Executor, GraphBuilder, Inputs, KernelResult, Mode, NodeOp, Result,
};
use wick_ops::{CustomKernel, Kernel, KernelClass, KernelPhase, OpError};
use wick_profiler::TimeProfiler;

/// `y = x³` (forward). in: x; out: y.
#[derive(Debug)]
struct Cube {
    /// A deliberately wrong output shape, to test the executor's check.
    lie: bool,
}

/// `gx = 3x² · gy`. in: gy, x; out: gx.
#[derive(Debug)]
struct CubeBackward;

const CUBE: CustomKernel = CustomKernel {
    name: "CubeForward",
    class: KernelClass::Elementwise,
    phase: KernelPhase::Forward,
};

impl NodeOp for Cube {
    fn kernel(&self) -> Kernel {
        Kernel::Custom(CUBE)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let x = arg(inputs, 0, "cube")?;
        let y = x.powf(3.0).map_err(|e| OpError::candle("cube", e))?;
        if self.lie {
            return one(y.flatten_all().map_err(|e| OpError::candle("cube", e))?);
        }
        one(y)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let (gy, x) = (ctx.grad_y()?, ctx.input(0));
        ctx.record_input_grad(CubeBackward, vec![gy, x], "grad.cube", 0)
    }
}

impl NodeOp for CubeBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Custom(CustomKernel {
            name: "CubeBackward",
            phase: KernelPhase::Backward,
            ..CUBE
        })
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, x] = args(inputs, "cube")?;
        let d = (x.sqr().and_then(|s| s * 3.0)).map_err(|e| OpError::candle("cube", e))?;
        one((gy * d).map_err(|e| OpError::candle("cube", e))?)
    }
}

fn graph(lie: bool) -> (Executor, wick_graph::ValueId) {
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let w = b.param("w", &[2, 3]).unwrap();
    let y = b
        .in_layer("cube", |b| {
            let shape = b.shape(w).to_vec();
            b.custom_op(Cube { lie }, &[w], vec![("cube", shape, DType::F64)], 12)
        })
        .unwrap()[0];
    let t = b.input("t", &[2, 3], DType::F64).unwrap();
    let loss = b.mse_loss(y, t).unwrap();
    let grads = b.backward(loss).unwrap();
    let g = grads.get(w).unwrap();
    b.output(g);
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let w0 = Tensor::new(&[[1.0f64, -2.0, 0.5], [0.0, 3.0, -1.0]], &Device::Cpu).unwrap();
    exec.set("w", &w0).unwrap();
    exec.set("t", &w0.zeros_like().unwrap()).unwrap();
    (exec, g)
}

#[test]
fn a_custom_op_differentiates_and_is_profiled_by_its_own_name() {
    let (mut exec, g) = graph(false);
    exec.add_hook(TimeProfiler::new(2, 0)).unwrap();
    exec.run().unwrap();
    // d mean(w⁶)/dw = 6 w⁵ / 6.
    let got: Vec<f64> = exec
        .value(g)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let w = [1.0f64, -2.0, 0.5, 0.0, 3.0, -1.0];
    for (g, w) in got.iter().zip(w) {
        assert!((g - w.powi(5)).abs() < 1e-12, "{g} vs {}", w.powi(5));
    }
    let profile = exec.hook::<TimeProfiler>().unwrap().profile();
    let cube = profile
        .ops
        .iter()
        .find(|o| o.name == "CubeForward")
        .expect("timed by name");
    assert_eq!(cube.class, KernelClass::Elementwise);
    assert_eq!(cube.origin.layer.as_deref(), Some("cube"));
    assert_eq!(cube.flops, 12);
    assert!(profile
        .ops
        .iter()
        .any(|o| o.name == "CubeBackward" && o.phase == wick_graph::Phase::Backward));
    assert!(profile.singa_lines().contains("CubeForward"));
}

#[test]
fn a_custom_op_that_breaks_its_shape_promise_is_an_error_naming_it() {
    let (mut exec, _) = graph(true);
    let err = exec.run().unwrap_err().to_string();
    assert_mentions(
        &err,
        &["CubeForward", "OP_ID0", "layer cube", "[6]", "[2, 3]"],
    );
}

/// `(2·x[:, :h], x[:, h:]²)`: two outputs, each with its own gradient. in: x; out: the
/// two halves.
#[derive(Debug)]
struct TwoHalves;

/// Its gradient: each half's from its own output gradient, zero where an output has
/// none. in: x, then the gradients present; out: gx.
#[derive(Debug)]
struct TwoHalvesBackward {
    present: [bool; 2],
}

/// The two halves of `x` along dimension 1.
fn halves(x: &Tensor) -> std::result::Result<[Tensor; 2], OpError> {
    let h = x.dim(1).map_err(candle_err)? / 2;
    let half = |start| x.narrow(1, start, h).map_err(candle_err);
    Ok([half(0)?, half(h)?])
}

fn candle_err(e: candle_core::Error) -> OpError {
    OpError::candle("two_halves", e)
}

fn halves_kernel(phase: KernelPhase) -> Kernel {
    // A name made at run time: custom kernels may take owned names.
    let name = format!(
        "TwoHalves{}",
        if phase == KernelPhase::Forward {
            ""
        } else {
            "Backward"
        }
    );
    Kernel::Custom(CustomKernel::new(name, KernelClass::Elementwise, phase))
}

impl NodeOp for TwoHalves {
    fn kernel(&self) -> Kernel {
        halves_kernel(KernelPhase::Forward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [a, b] = halves(arg(inputs, 0, "two_halves")?)?;
        let a = (a * 2.0).map_err(candle_err)?;
        let b = b.sqr().map_err(candle_err)?;
        Ok(vec![Some(a), Some(b)])
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let x = ctx.input(0);
        let grads = [ctx.grad_output(0), ctx.grad_output(1)];
        let mut inputs = vec![x];
        inputs.extend(grads.iter().flatten());
        let op = TwoHalvesBackward {
            present: grads.map(|g| g.is_some()),
        };
        let g = ctx.record(
            op,
            inputs,
            vec![(String::from("grad.halves"), ctx.shape(x), ctx.dtype())],
            0,
        );
        ctx.contribute_to_inputs(&g);
        Ok(())
    }
}

impl NodeOp for TwoHalvesBackward {
    fn kernel(&self) -> Kernel {
        halves_kernel(KernelPhase::Backward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [xa, xb] = halves(arg(inputs, 0, "two_halves")?)?;
        let mut next = 1;
        // A half's gradient: its output's gradient times the derivative `f` of the half,
        // or zeros where that output has no gradient.
        let mut half = |present: bool, f: &dyn Fn(&Tensor) -> candle_core::Result<Tensor>, xs| {
            if !present {
                return Tensor::zeros_like(xs).map_err(candle_err);
            }
            let g = arg(inputs, next, "two_halves")?;
            next += 1;
            (g * f(xs).map_err(candle_err)?).map_err(candle_err)
        };
        let ga = half(self.present[0], &|xs| xs.ones_like()? * 2.0, &xa)?;
        let gb = half(self.present[1], &|xs| xs * 2.0, &xb)?;
        one(Tensor::cat(&[ga, gb], 1).map_err(candle_err)?)
    }
}

#[test]
fn a_custom_op_with_two_outputs_gets_each_output_its_gradient() {
    let cpu = Device::Cpu;
    let x0 = Tensor::new(&[[1.0f64, -2.0, 3.0, 0.5], [0.25, 4.0, -1.0, 2.0]], &cpu).unwrap();
    // Loss 1: sum(a) + sum(b) → gx = [2, 2 | 2x]; loss 2 uses only b → gx = [0, 0 | 2x].
    for both in [true, false] {
        let mut b = GraphBuilder::new(Mode::Train, DType::F64);
        let x = b.param("x", &[2, 4]).unwrap();
        let stem = String::from("half"); // owned output names
        let outs = b
            .custom_op(
                TwoHalves,
                &[x],
                vec![
                    (stem.clone(), vec![2, 2], DType::F64),
                    (stem, vec![2, 2], DType::F64),
                ],
                8,
            )
            .unwrap();
        let sb = b.sum(outs[1], &[], false).unwrap();
        let loss = if both {
            let sa = b.sum(outs[0], &[], false).unwrap();
            b.add(sa, sb).unwrap()
        } else {
            sb
        };
        let grads = b.backward(loss).unwrap();
        let g = grads.get(x).unwrap();
        b.output(g);
        let mut exec = Executor::new(b.finish(), &cpu);
        exec.set("x", &x0).unwrap();
        exec.run().unwrap();
        let got: Vec<Vec<f64>> = exec.value(g).unwrap().to_vec2().unwrap();
        let a = if both { 2.0 } else { 0.0 };
        let want = vec![vec![a, a, 6.0, 1.0], vec![a, a, -2.0, 4.0]];
        assert_eq!(got, want, "both outputs used: {both}");
        let names: Vec<_> = exec
            .graph()
            .nodes()
            .iter()
            .map(|n| n.op.kernel().name(wick_ops::DeviceKind::Cpu))
            .collect();
        assert!(names.contains(&"TwoHalvesBackward"), "{names:?}");
    }
}
