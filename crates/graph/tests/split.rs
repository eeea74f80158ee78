//! `split` and `chunk` as one node each way: the pieces in one `Split` node, their
//! gradients joined by one `SplitBackward` (zeros for a piece no loss reads), where a
//! `narrow` per piece wrote a zero-padded copy of the input per piece.

use candle_core::{DType, Device, Tensor};
use wick_graph::{Executor, GraphBuilder, Mode};
use wick_ops::tensor::TensorKernel;
use wick_ops::Kernel;

#[test]
fn one_node_splits_and_one_joins_the_gradients_with_zeros_for_an_unread_piece() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let x = b.param("x", &[2, 3, 7]).unwrap();
    // Pieces of 3, 3 and 1 along the last dimension; the middle one is never read.
    let parts = b.split(x, 3, -1).unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(b.shape(parts[2]), &[2, 3, 1]);
    let twice = b.scale(parts[0], 2.0).unwrap();
    let s0 = b.sum(twice, &[0, 1, 2], false).unwrap();
    let s2 = b.sum(parts[2], &[0, 1, 2], false).unwrap();
    let loss = b.add(s0, s2).unwrap();
    let grads = b.backward(loss).unwrap();
    let gx = grads.get(x).unwrap();
    b.output(gx);
    let graph = b.finish();
    let kernels: Vec<Kernel> = graph.nodes().iter().map(|n| n.kernel()).collect();
    let count = |k: TensorKernel| kernels.iter().filter(|&&n| n == Kernel::Tensor(k)).count();
    assert_eq!(count(TensorKernel::Split), 1, "{kernels:?}");
    assert_eq!(count(TensorKernel::SplitBackward), 1, "{kernels:?}");
    assert_eq!(count(TensorKernel::NarrowBackward), 0, "{kernels:?}");
    let mut exec = Executor::new(graph, &Device::Cpu);
    let values: Vec<f64> = (0..42).map(f64::from).collect();
    exec.set(
        "x",
        &Tensor::from_vec(values, (2, 3, 7), &Device::Cpu).unwrap(),
    )
    .unwrap();
    exec.run().unwrap();
    let g = exec.value(gx).unwrap();
    let row: Vec<f64> = g.get(1).unwrap().get(2).unwrap().to_vec1().unwrap();
    assert_eq!(row, [2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 1.0]);
}

#[test]
fn zero_pieces_or_a_dimension_out_of_range_is_an_error_naming_the_op() {
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("x", &[2, 6], DType::F32).unwrap();
    let e = b.split(x, 0, -1).unwrap_err().to_string();
    assert!(
        e.contains("split") && e.contains("split_size must be positive"),
        "{e}"
    );
    let e = b.chunk(x, 0, 1).unwrap_err().to_string();
    assert!(
        e.contains("chunk") && e.contains("chunks must be positive"),
        "{e}"
    );
    let e = b.chunk(x, 2, 2).unwrap_err().to_string();
    assert!(e.contains("chunk"), "{e}");
    assert_eq!(
        b.chunk(x, 4, 1).unwrap().len(),
        3,
        "pieces of 2, as PyTorch's"
    );
}
