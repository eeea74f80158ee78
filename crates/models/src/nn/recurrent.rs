//! The recurrent layers `nn.LSTM` and `nn.GRU` (`batch_first=True`), with PyTorch's gate
//! order, parameter names (`weight_ih_l0`, `bias_hh_l1_reverse`) and initialisation,
//! unrolled over time from builder ops: one set of weights serves every time step.
//!
//! The input projection of every time step is one GEMM over the `T·N` rows before the
//! recurrence starts (as PyTorch's CPU LSTM does); each step then adds `h · W_hhᵀ`.

use wick_graph::{GraphBuilder, GraphError, ValueId};

use super::{Init, LayerResult, Layers, TensorRole};

/// The size of an `nn.LSTM`/`nn.GRU`: `Recurrent::new(input_size, hidden_size)`, one
/// layer, one direction, no dropout, as PyTorch's defaults. The layers always take
/// `batch_first` input `[N, T, input_size]`.
///
/// # Examples
///
/// `nn.LSTM(16, 32, num_layers=2, batch_first=True, bidirectional=True)`:
///
/// ```
/// use candle_core::DType;
/// use wick_graph::{GraphBuilder, Mode};
/// use wick_models::nn::{Layers, Recurrent};
///
/// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
/// let x = b.input("tokens", &[4, 10, 16], DType::F32)?;
/// let mut nn = Layers::new(&mut b);
/// let lstm = Recurrent::new(16, 32).num_layers(2).bidirectional();
/// let out = nn.lstm("rnn", x, lstm, None)?;
/// assert_eq!(nn.builder().shape(out.output), &[4, 10, 64]); // both directions
/// assert_eq!(nn.builder().shape(out.h_n), &[4, 4, 32]); // layers x directions
/// assert_eq!(nn.specs()[0].name, "rnn.weight_ih_l0");
/// assert_eq!(nn.specs()[4].name, "rnn.weight_ih_l0_reverse");
/// # Ok::<(), wick_graph::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recurrent {
    /// Features of each input step.
    pub input_size: usize,
    /// Features of the hidden state.
    pub hidden_size: usize,
    /// Stacked layers, each reading the previous one's output sequence.
    pub num_layers: usize,
    /// A second direction reading the sequence backwards, concatenated to the first.
    pub bidirectional: bool,
    /// Dropout on each layer's output but the last's, in training graphs.
    pub dropout: f64,
}

impl Recurrent {
    /// One layer, one direction, no dropout.
    pub fn new(input_size: usize, hidden_size: usize) -> Self {
        Recurrent {
            input_size,
            hidden_size,
            num_layers: 1,
            bidirectional: false,
            dropout: 0.0,
        }
    }

    /// With this many stacked layers.
    pub fn num_layers(mut self, n: usize) -> Self {
        self.num_layers = n;
        self
    }

    /// With a backward direction too.
    pub fn bidirectional(mut self) -> Self {
        self.bidirectional = true;
        self
    }

    /// With dropout `p` between layers.
    pub fn dropout(mut self, p: f64) -> Self {
        self.dropout = p;
        self
    }

    fn directions(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }
}

/// What `nn.LSTM` returns: `output, (h_n, c_n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LstmOutput {
    /// `[N, T, directions·hidden]`: the last layer's hidden state at every step.
    pub output: ValueId,
    /// `[layers·directions, N, hidden]`: every layer's last hidden state.
    pub h_n: ValueId,
    /// `[layers·directions, N, hidden]`: every layer's last cell state.
    pub c_n: ValueId,
}

/// What `nn.GRU` returns: `output, h_n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GruOutput {
    /// `[N, T, directions·hidden]`: the last layer's hidden state at every step.
    pub output: ValueId,
    /// `[layers·directions, N, hidden]`: every layer's last hidden state.
    pub h_n: ValueId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    Lstm,
    Gru,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Cell::Lstm => "lstm",
            Cell::Gru => "gru",
        }
    }
}

/// One direction of one layer: its four parameters.
struct Weights {
    w_ih: ValueId,
    w_hh: ValueId,
    b_ih: ValueId,
    b_hh: ValueId,
}

/// The state carried between steps; `None` is PyTorch's zero initial state, whose terms
/// are left out rather than computed.
#[derive(Clone, Copy)]
struct State {
    h: Option<ValueId>,
    c: Option<ValueId>,
}

impl Layers<'_> {
    /// `nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, bidirectional,
    /// dropout)` as layer `path` over `x` `[N, T, input_size]`, from the initial state
    /// `(h_0, c_0)` (each `[layers·directions, N, hidden]`; `None`: zeros).
    ///
    /// Gates in PyTorch's order (input, forget, cell, output); parameters
    /// `path.weight_ih_l{k}` `[4·hidden, in]`, `path.weight_hh_l{k}`, `path.bias_ih_l{k}`,
    /// `path.bias_hh_l{k}` (`_reverse` for the second direction), all uniform within
    /// ±1/sqrt(hidden) as PyTorch's. Applied again under the same path, it shares them.
    pub fn lstm(
        &mut self,
        path: &str,
        x: ValueId,
        cfg: Recurrent,
        state: Option<(ValueId, ValueId)>,
    ) -> wick_graph::Result<LstmOutput> {
        let (h0, c0) = (state.map(|s| s.0), state.map(|s| s.1));
        let (output, h_n, c_n) = self.recurrent(path, x, cfg, Cell::Lstm, h0, c0)?;
        let c_n = c_n.expect("an LSTM carries a cell state");
        Ok(LstmOutput { output, h_n, c_n })
    }

    /// `nn.GRU(input_size, hidden_size, num_layers, batch_first=True, bidirectional,
    /// dropout)` as layer `path` over `x` `[N, T, input_size]`, from `h_0`
    /// (`[layers·directions, N, hidden]`; `None`: zeros).
    ///
    /// Gates in PyTorch's order (reset, update, new), with the reset gate applied to
    /// `h·W_hnᵀ + b_hn` as PyTorch's; parameters named and initialised as
    /// [`lstm`](Layers::lstm)'s, with `3·hidden` rows.
    pub fn gru(
        &mut self,
        path: &str,
        x: ValueId,
        cfg: Recurrent,
        h0: Option<ValueId>,
    ) -> wick_graph::Result<GruOutput> {
        let (output, h_n, _) = self.recurrent(path, x, cfg, Cell::Gru, h0, None)?;
        Ok(GruOutput { output, h_n })
    }

    fn recurrent(
        &mut self,
        path: &str,
        x: ValueId,
        cfg: Recurrent,
        cell: Cell,
        h0: Option<ValueId>,
        c0: Option<ValueId>,
    ) -> wick_graph::Result<(ValueId, ValueId, Option<ValueId>)> {
        let batch = check_shapes(self.builder(), path, cell, x, &cfg, [h0, c0])?;
        let dirs = cfg.directions();
        self.scope(path, |nn| {
            let mut input = x;
            let (mut h_last, mut c_last) = (Vec::new(), Vec::new());
            for layer in 0..cfg.num_layers {
                let in_size = match layer {
                    0 => cfg.input_size,
                    _ => cfg.hidden_size * dirs,
                };
                let mut outputs = Vec::with_capacity(dirs);
                for dir in 0..dirs {
                    let suffix = match dir {
                        0 => format!("l{layer}"),
                        _ => format!("l{layer}_reverse"),
                    };
                    let w = nn.cell_weights(&suffix, cell, in_size, cfg.hidden_size)?;
                    let b = nn.builder();
                    let at = |b: &mut GraphBuilder, s: Option<ValueId>| {
                        s.map(|s| initial(b, s, layer * dirs + dir, batch, cfg.hidden_size))
                            .transpose()
                    };
                    let start = State {
                        h: at(b, h0)?,
                        c: at(b, c0)?,
                    };
                    let (seq, last) = run_direction(b, cell, input, &w, start, dir == 1)?;
                    outputs.push(seq);
                    h_last.push(last.h.expect("a step ran"));
                    c_last.extend(last.c);
                }
                let b = nn.builder();
                input = match dirs {
                    1 => outputs[0],
                    _ => b.concat(&outputs, 2)?,
                };
                if cfg.dropout > 0.0 && layer + 1 < cfg.num_layers {
                    input = b.dropout(input, cfg.dropout)?;
                }
            }
            let b = nn.builder();
            let h_n = b.stack(&h_last, 0)?;
            let c_n = match cell {
                Cell::Lstm => Some(b.stack(&c_last, 0)?),
                Cell::Gru => None,
            };
            Ok((input, h_n, c_n))
        })
    }

    /// The four parameters of one direction of one layer, PyTorch's names and init.
    fn cell_weights(
        &mut self,
        suffix: &str,
        cell: Cell,
        in_size: usize,
        hidden: usize,
    ) -> wick_graph::Result<Weights> {
        let rows = cell.gates() * hidden;
        let init = Init::Uniform(1.0 / (hidden as f64).sqrt());
        let (fc_w, fc_b) = (TensorRole::FcWeight, TensorRole::FcBias);
        Ok(Weights {
            w_ih: self.param(
                &format!("weight_ih_{suffix}"),
                &[rows, in_size],
                fc_w,
                init,
                in_size,
            )?,
            w_hh: self.param(
                &format!("weight_hh_{suffix}"),
                &[rows, hidden],
                fc_w,
                init,
                hidden,
            )?,
            b_ih: self.param(&format!("bias_ih_{suffix}"), &[rows], fc_b, init, in_size)?,
            b_hh: self.param(&format!("bias_hh_{suffix}"), &[rows], fc_b, init, hidden)?,
        })
    }
}

/// Checks `x` and the initial states against `cfg`; returns the batch size.
fn check_shapes(
    b: &GraphBuilder,
    path: &str,
    cell: Cell,
    x: ValueId,
    cfg: &Recurrent,
    states: [Option<ValueId>; 2],
) -> wick_graph::Result<usize> {
    let usage = |what: String| GraphError::Usage(format!("{} `{path}`: {what}", cell.name()));
    if cfg.hidden_size == 0 || cfg.num_layers == 0 {
        return Err(usage(format!(
            "hidden_size {} and num_layers {} must be positive",
            cfg.hidden_size, cfg.num_layers
        )));
    }
    if !(0.0..1.0).contains(&cfg.dropout) {
        return Err(usage(format!("dropout {} is not in [0, 1)", cfg.dropout)));
    }
    let xs = b.shape(x);
    if xs.len() != 3 || xs[2] != cfg.input_size || xs[1] == 0 {
        return Err(usage(format!(
            "input of shape {xs:?} is not [N, T, input_size = {}] with T > 0 (batch_first)",
            cfg.input_size
        )));
    }
    let expected = [cfg.num_layers * cfg.directions(), xs[0], cfg.hidden_size];
    for s in states.into_iter().flatten() {
        if b.shape(s) != expected {
            return Err(usage(format!(
                "initial state `{}` has shape {:?}, expected [layers·directions, N, hidden] = {expected:?}",
                b.graph().value(s).name,
                b.shape(s)
            )));
        }
    }
    Ok(xs[0])
}

/// Row `index` of an initial state `[L·D, N, H]`, as `[N, H]`.
fn initial(
    b: &mut GraphBuilder,
    state: ValueId,
    index: usize,
    batch: usize,
    hidden: usize,
) -> LayerResult {
    let row = b.narrow(state, 0, index, 1)?;
    b.reshape(row, &[batch, hidden])
}

/// One direction over the whole sequence: the output `[N, T, H]` and the last state.
fn run_direction(
    b: &mut GraphBuilder,
    cell: Cell,
    x: ValueId,
    w: &Weights,
    mut state: State,
    reverse: bool,
) -> wick_graph::Result<(ValueId, State)> {
    let xs = b.shape(x).to_vec();
    let (n, t, in_size) = (xs[0], xs[1], xs[2]);
    let rows = b.shape(w.w_ih)[0];
    // Every step's input projection in one GEMM, time-major so each step's rows are
    // contiguous. An LSTM's two biases always add, so they are folded into it once.
    let time_major = b.permute(x, &[1, 0, 2])?;
    let flat = b.reshape(time_major, &[t * n, in_size])?;
    let bias = match cell {
        Cell::Lstm => b.add(w.b_ih, w.b_hh)?,
        Cell::Gru => w.b_ih,
    };
    let projected = b.linear(flat, w.w_ih, Some(bias))?;
    let projected = b.reshape(projected, &[t, n, rows])?;
    let steps = b.split(projected, 1, 0)?;
    let mut hs = Vec::with_capacity(t);
    let order: Vec<usize> = match reverse {
        false => (0..t).collect(),
        true => (0..t).rev().collect(),
    };
    for s in order {
        let gi = b.reshape(steps[s], &[n, rows])?;
        state = match cell {
            Cell::Lstm => lstm_step(b, gi, w, state)?,
            Cell::Gru => gru_step(b, gi, w, state)?,
        };
        hs.push(state.h.expect("a step sets h"));
    }
    if reverse {
        hs.reverse();
    }
    Ok((b.stack(&hs, 1)?, state))
}

/// `i, f, g, o = σ, σ, tanh, σ (gi + h·W_hhᵀ)`; `c' = f·c + i·g`; `h' = o·tanh(c')`.
fn lstm_step(
    b: &mut GraphBuilder,
    gi: ValueId,
    w: &Weights,
    state: State,
) -> wick_graph::Result<State> {
    let gates = match state.h {
        Some(h) => {
            let gh = b.linear(h, w.w_hh, None)?;
            b.add(gi, gh)?
        }
        None => gi,
    };
    let g = b.chunk(gates, 4, 1)?;
    let (i, f) = (b.sigmoid(g[0])?, b.sigmoid(g[1])?);
    let (cand, o) = (b.tanh(g[2])?, b.sigmoid(g[3])?);
    let ic = b.mul(i, cand)?;
    let c = match state.c {
        Some(c) => {
            let fc = b.mul(f, c)?;
            b.add(fc, ic)?
        }
        None => ic,
    };
    let tc = b.tanh(c)?;
    let h = b.mul(o, tc)?;
    Ok(State {
        h: Some(h),
        c: Some(c),
    })
}

/// `r, z = σ(gi + gh)`; `n = tanh(gi_n + r·gh_n)`; `h' = n + z·(h − n)`, with
/// `gh = h·W_hhᵀ + b_hh` (`b_hh` alone from a zero state).
fn gru_step(
    b: &mut GraphBuilder,
    gi: ValueId,
    w: &Weights,
    state: State,
) -> wick_graph::Result<State> {
    let gh = match state.h {
        Some(h) => {
            let gh = b.linear(h, w.w_hh, Some(w.b_hh))?;
            b.chunk(gh, 3, 1)?
        }
        None => b.chunk(w.b_hh, 3, 0)?,
    };
    let gi = b.chunk(gi, 3, 1)?;
    let r = b.broadcast_add(gi[0], gh[0])?;
    let r = b.sigmoid(r)?;
    let z = b.broadcast_add(gi[1], gh[1])?;
    let z = b.sigmoid(z)?;
    let rn = b.mul(r, gh[2])?;
    let n = b.add(gi[2], rn)?;
    let n = b.tanh(n)?;
    let h = match state.h {
        Some(h) => {
            let d = b.sub(h, n)?;
            let zd = b.mul(z, d)?;
            b.add(n, zd)?
        }
        None => {
            let zn = b.mul(z, n)?;
            b.sub(n, zn)?
        }
    };
    Ok(State {
        h: Some(h),
        c: None,
    })
}
