//! A user's own op through the public API only: a custom `NodeOp` with its own kernel
//! name, a backward rule recording a second custom op, timed and named by the profiler
//! like a built-in op, and a broken promise (wrong output shape) reported by name.

use candle_core::{DType, Device, Tensor};
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
        let shape = ctx.shape(x);
        let g = ctx.record(
            CubeBackward,
            vec![gy, x],
            vec![("grad.cube", shape, ctx.dtype())],
            0,
        );
        ctx.contribute_to_inputs(&g);
        Ok(())
    }
}

impl NodeOp for CubeBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Custom(CustomKernel {
            name: "CubeBackward",
            class: KernelClass::Elementwise,
            phase: KernelPhase::Backward,
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
        .get_id(g)
        .unwrap()
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
    for needle in ["CubeForward", "OP_ID0", "[6]", "[2, 3]"] {
        assert!(err.contains(needle), "{needle} in {err}");
    }
}
