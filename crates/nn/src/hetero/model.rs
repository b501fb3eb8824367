//! [`HeteroModel`]: R-GCN and R-SAGE, stacks of relational layers over node types.
//!
//! - R-GCN (Schlichtkrull et al., <https://arxiv.org/abs/1703.06103>), as DGL's ogbn-mag
//!   example builds it (`HeteroGraphConv` of one `GraphConv(norm="right")` per relation, summed,
//!   plus a self-loop `Linear` per node type):
//!   `h'_v = W_loop[t] h_v + b[t] + sum_r mean_{u in N_r(v)} h_u W_r`.
//! - R-SAGE, what PyG's `to_hetero(GraphSAGE)` builds: one SAGEConv per relation, summed per
//!   destination type: `h'_v = sum_r (W_r^l mean_{u in N_r(v)} h_u + b_r + W_r^root h_v)`.
//!
//! Hidden layers apply ReLU, then dropout. A relation is one more aggregation, the same mean
//! kernel the homogeneous layers use over a bipartite graph, followed by a product with its
//! weight; no layer code is copied per relation.
//!
//! Parameters are `[in, out]` weights and `[out]` biases named
//! `layers.{l}.rel.{src__rel__dst}.weight` and `layers.{l}.loop.{type}.{weight,bias}` (R-GCN),
//! `layers.{l}.rel.{src__rel__dst}.{lin_l.weight,lin_l.bias,lin_r.weight}` (R-SAGE). A layer
//! computes only the node types the layers after it read: the last layer only the target
//! type, and each layer before it the types the next one reads from.

use std::ops::Range;

use graphloom_tensor::autodiff::ops::{self, Activation, Dropout, OutputDropout, Probability};
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tape, Tensor, Var};

use super::graph::HeteroLayerGraph;
use crate::layers::init::{glorot, kaiming_uniform};
use crate::model::{Mode, Param};
use crate::{Error, Result, MAX_PARAMETERS};

/// Which relational layer a model stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelationalKind {
    /// R-GCN: a weight per relation and a self-loop per node type.
    Rgcn,
    /// R-SAGE: a GraphSAGE layer per relation, summed per destination type.
    Rsage,
}

impl RelationalKind {
    /// The lower-case name (`rgcn`, `rsage`).
    pub fn name(self) -> &'static str {
        match self {
            RelationalKind::Rgcn => "rgcn",
            RelationalKind::Rsage => "rsage",
        }
    }
}

/// A relation as a model sees it: its name and the indices of its source and destination
/// node types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationSpec {
    /// `<src>__<rel>__<dst>`.
    pub name: String,
    /// The source type.
    pub src_type: usize,
    /// The destination type.
    pub dst_type: usize,
}

/// The shape of a relational model: its node types and their input widths, its relations,
/// which type it classifies, its sizes and rates.
#[derive(Clone, Debug)]
pub struct HeteroModelConfig {
    /// The layer.
    pub kind: RelationalKind,
    /// The node types' names.
    pub types: Vec<String>,
    /// Each type's input width (its features', or its learnt embedding's).
    pub in_dims: Vec<usize>,
    /// The relations.
    pub relations: Vec<RelationSpec>,
    /// The type whose nodes the model classifies.
    pub target: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Number of classes.
    pub out_dim: usize,
    /// Number of layers (at least 1).
    pub layers: usize,
    /// Dropout after every hidden layer's activation.
    pub dropout: Probability,
    /// R-GCN: each relation's weight a combination of this many bases shared by the relations
    /// of a layer that read inputs of one width (Schlichtkrull et al.'s basis decomposition),
    /// instead of a weight of its own.
    pub num_bases: Option<usize>,
    /// The dtype of parameters and activations: f32, or f64 (for exactness checks).
    pub dtype: DType,
}

impl HeteroModelConfig {
    /// Which types layer `l` outputs: the target at the last layer; before it, the types the
    /// next layer outputs and those its relations read from.
    pub fn output_types(&self, l: usize) -> Vec<bool> {
        let mut needed = vec![false; self.types.len()];
        needed[self.target] = true;
        for _ in l + 1..self.layers {
            let mut before = needed.clone();
            for r in &self.relations {
                if needed[r.dst_type] {
                    before[r.src_type] = true;
                }
            }
            needed = before;
        }
        needed
    }

    /// The input width of each type at layer `l`.
    fn widths_in(&self, l: usize) -> Vec<usize> {
        if l == 0 {
            self.in_dims.clone()
        } else {
            vec![self.hidden; self.types.len()]
        }
    }

    /// The output width of layer `l`.
    pub fn width_out(&self, l: usize) -> usize {
        if l + 1 == self.layers {
            self.out_dim
        } else {
            self.hidden
        }
    }

    /// Every setting that changes the numbers a run computes, for the snapshot check.
    pub fn fingerprint(&self) -> String {
        format!(
            "{} of {} layers over types {:?} ({:?} wide) and relations {:?}, hidden {}, {} \
             classes of {}, dropout {}, bases {:?}, {}",
            self.kind.name(),
            self.layers,
            self.types,
            self.in_dims,
            self.relations.iter().map(|r| &r.name).collect::<Vec<_>>(),
            self.hidden,
            self.out_dim,
            self.types[self.target],
            self.dropout,
            self.num_bases,
            self.dtype
        )
    }

    /// The number of scalar parameters of the model, computed without allocating any
    /// (`None` past `usize`).
    pub fn param_count(&self) -> Option<usize> {
        let mut total = 0usize;
        for l in 0..self.layers {
            let outputs = self.output_types(l);
            let (ins, out) = (self.widths_in(l), self.width_out(l));
            let used: Vec<&RelationSpec> = self
                .relations
                .iter()
                .filter(|r| outputs[r.dst_type])
                .collect();
            for r in &used {
                let i = ins[r.src_type];
                let own = match (self.kind, self.num_bases) {
                    (RelationalKind::Rgcn, Some(b)) => Some(b),
                    (RelationalKind::Rgcn, None) => i.checked_mul(out),
                    (RelationalKind::Rsage, _) => i
                        .checked_add(ins[r.dst_type])
                        .and_then(|w| w.checked_mul(out))
                        .and_then(|w| w.checked_add(out)),
                };
                total = total.checked_add(own?)?;
            }
            if let Some(b) = self.num_bases {
                let mut widths: Vec<usize> = used.iter().map(|r| ins[r.src_type]).collect();
                widths.sort_unstable();
                widths.dedup();
                for w in widths {
                    total = total.checked_add(w.checked_mul(out)?.checked_mul(b)?)?;
                }
            }
            if self.kind == RelationalKind::Rgcn {
                for t in (0..self.types.len()).filter(|&t| outputs[t]) {
                    total = total.checked_add(ins[t].checked_add(1)?.checked_mul(out)?)?;
                }
            }
        }
        Some(total)
    }

    fn check(&self) -> Result<()> {
        let invalid = |reason: String| Error::InvalidSetting {
            setting: "model widths",
            reason,
        };
        if self.layers == 0 || self.hidden == 0 || self.out_dim == 0 {
            return Err(invalid(
                "layers, hidden width and classes must be at least 1".into(),
            ));
        }
        match (self.num_bases, self.kind) {
            (Some(b), _) if b == 0 || b > self.relations.len() => {
                return Err(Error::InvalidSetting {
                    setting: "num_bases",
                    reason: format!(
                        "{b} bases for {} relations: give 1 to {} (more bases than relations \
                         decompose nothing)",
                        self.relations.len(),
                        self.relations.len()
                    ),
                })
            }
            (Some(_), RelationalKind::Rsage) => {
                return Err(Error::InvalidSetting {
                    setting: "num_bases",
                    reason: "bases decompose R-GCN's relation weights; rsage has none".into(),
                })
            }
            _ => {}
        }
        if !matches!(self.dtype, DType::F32 | DType::F64) {
            return Err(Error::InvalidSetting {
                setting: "compute dtype",
                reason: format!(
                    "the relational models compute in f32 or f64, not {}",
                    self.dtype
                ),
            });
        }
        let types = self.types.len();
        if self.in_dims.len() != types || self.target >= types {
            return Err(invalid(format!(
                "{} input widths and target {} for {types} node types",
                self.in_dims.len(),
                self.target
            )));
        }
        if let Some(r) = self
            .relations
            .iter()
            .find(|r| r.src_type >= types || r.dst_type >= types)
        {
            return Err(invalid(format!(
                "relation {} names a type beyond the {types} node types",
                r.name
            )));
        }
        // Checked before any parameter is allocated: widths a user gives could ask for more
        // than memory can address.
        if self.param_count().is_none_or(|n| n > MAX_PARAMETERS) {
            return Err(invalid(format!(
                "input widths {:?}, hidden {} and {} classes make more than {MAX_PARAMETERS} \
                 parameters",
                self.in_dims, self.hidden, self.out_dim
            )));
        }
        Ok(())
    }
}

/// The parameters of one layer: per relation and per type, the range of the model's
/// parameters it takes (empty where the layer does not compute it).
#[derive(Clone, Debug, Default)]
struct LayerParams {
    relations: Vec<Range<usize>>,
    types: Vec<Range<usize>>,
    /// With bases: the input width of each basis tensor and its index in the parameters.
    bases: Vec<(usize, usize)>,
}

/// A relational GNN: its configuration and parameters. It holds no graph: each forward pass
/// gets one [`HeteroLayerGraph`] per layer.
pub struct HeteroModel {
    /// The configuration.
    pub cfg: HeteroModelConfig,
    /// Every parameter, layer by layer.
    pub params: Vec<Param>,
    layers: Vec<LayerParams>,
}

/// The purpose of a hidden layer's dropout draws: layer `l`'s output of type `t` of `T` uses
/// `DROPOUT_PURPOSE + l * T + t`, so types whose ids coincide draw different masks.
const DROPOUT_PURPOSE: u64 = 0x4854_4450_0000;

impl HeteroModel {
    /// The model of `cfg` with parameters initialised from `seed` (DGL's initialisation for
    /// R-GCN: Glorot relation weights, PyTorch's `Linear` for the self-loops; PyG's `Linear`
    /// for R-SAGE).
    pub fn new(cfg: HeteroModelConfig, seed: u64) -> Result<HeteroModel> {
        cfg.check()?;
        let _g = category_scope(Category::Optimizer);
        let mut params = Vec::new();
        let mut layers = Vec::with_capacity(cfg.layers);
        let mut total = 0usize;
        for l in 0..cfg.layers {
            let outputs = cfg.output_types(l);
            let (ins, out) = (cfg.widths_in(l), cfg.width_out(l));
            let mut layer = LayerParams::default();
            let mut add = |params: &mut Vec<Param>, name: String, shape: Vec<usize>, value| {
                total = total.saturating_add(shape.iter().product());
                params.push(Param { name, value });
            };
            let key = |k: usize| RngKey::new(seed, u64::MAX, (l * 1_000_003 + k) as u64);
            if let Some(b) = cfg.num_bases {
                // One set of bases per input width the layer's relations read.
                let mut widths: Vec<usize> = cfg
                    .relations
                    .iter()
                    .filter(|r| outputs[r.dst_type])
                    .map(|r| ins[r.src_type])
                    .collect();
                widths.sort_unstable();
                widths.dedup();
                for (k, &w) in widths.iter().enumerate() {
                    let shape = vec![b, w * out];
                    let v = glorot(&shape, w, out, key(1_000 + k), cfg.dtype)?;
                    layer.bases.push((w, params.len()));
                    add(&mut params, format!("layers.{l}.basis.{w}"), shape, v);
                }
            }
            let relations = cfg.relations.len();
            for (r, rel) in cfg.relations.iter().enumerate() {
                let start = params.len();
                if outputs[rel.dst_type] {
                    let i = ins[rel.src_type];
                    let prefix = format!("layers.{l}.rel.{}", rel.name);
                    match (cfg.kind, cfg.num_bases) {
                        (RelationalKind::Rgcn, Some(b)) => {
                            // DGL's initialisation of the coefficients, Glorot over
                            // [relations, bases].
                            let c = glorot(&[1, b], b, relations, key(3 * r), cfg.dtype)?;
                            add(&mut params, format!("{prefix}.coefficients"), vec![1, b], c);
                        }
                        (RelationalKind::Rgcn, None) => {
                            let w = glorot(&[i, out], i, out, key(3 * r), cfg.dtype)?;
                            add(&mut params, format!("{prefix}.weight"), vec![i, out], w);
                        }
                        (RelationalKind::Rsage, _) => {
                            let d = ins[rel.dst_type];
                            let wl = kaiming_uniform(&[i, out], i, key(3 * r), cfg.dtype)?;
                            let bl = kaiming_uniform(&[out], i, key(3 * r + 1), cfg.dtype)?;
                            let wr = kaiming_uniform(&[d, out], d, key(3 * r + 2), cfg.dtype)?;
                            add(
                                &mut params,
                                format!("{prefix}.lin_l.weight"),
                                vec![i, out],
                                wl,
                            );
                            add(&mut params, format!("{prefix}.lin_l.bias"), vec![out], bl);
                            add(
                                &mut params,
                                format!("{prefix}.lin_r.weight"),
                                vec![d, out],
                                wr,
                            );
                        }
                    }
                }
                layer.relations.push(start..params.len());
            }
            for (t, name) in cfg.types.iter().enumerate() {
                let start = params.len();
                if outputs[t] && cfg.kind == RelationalKind::Rgcn {
                    let k = 3 * cfg.relations.len() + 2 * t;
                    let i = ins[t];
                    let w = kaiming_uniform(&[i, out], i, key(k), cfg.dtype)?;
                    let b = kaiming_uniform(&[out], i, key(k + 1), cfg.dtype)?;
                    add(
                        &mut params,
                        format!("layers.{l}.loop.{name}.weight"),
                        vec![i, out],
                        w,
                    );
                    add(
                        &mut params,
                        format!("layers.{l}.loop.{name}.bias"),
                        vec![out],
                        b,
                    );
                }
                layer.types.push(start..params.len());
            }
            layers.push(layer);
        }
        debug_assert_eq!(Some(total), cfg.param_count());
        Ok(HeteroModel {
            cfg,
            params,
            layers,
        })
    }

    /// Replaces the parameters with `params` (same names and shapes, in order).
    pub fn set_params(&mut self, params: &[Param]) -> Result<()> {
        if params.len() != self.params.len() {
            return Err(Error::Mismatch {
                what: "saved parameters and the model",
                detail: format!(
                    "{} saved, the model has {}",
                    params.len(),
                    self.params.len()
                ),
            });
        }
        for (mine, saved) in self.params.iter_mut().zip(params) {
            if mine.name != saved.name || mine.value.shape() != saved.value.shape() {
                return Err(Error::Mismatch {
                    what: "saved parameters and the model",
                    detail: format!(
                        "{} {:?} saved where the model has {} {:?}",
                        saved.name,
                        saved.value.shape(),
                        mine.name,
                        mine.value.shape()
                    ),
                });
            }
            mine.value = saved.value.cast(self.cfg.dtype)?;
        }
        Ok(())
    }

    /// The class scores of the target type's output rows: `inputs[t]` holds the input rows of
    /// type `t` (the first graph's sources of that type; any value for a type no layer
    /// reads), `params` the parameters on the tape, `graphs` one graph per layer, from the
    /// input to the output.
    pub fn forward(
        &self,
        tape: &mut Tape,
        inputs: &[Var],
        params: &[Var],
        graphs: &[&HeteroLayerGraph],
        mode: Mode,
    ) -> Result<Var> {
        let cfg = &self.cfg;
        let types = cfg.types.len();
        if graphs.len() != cfg.layers || inputs.len() != types {
            return Err(Error::Mismatch {
                what: "a relational model's inputs and graphs",
                detail: format!(
                    "{} graphs for {} layers, {} inputs for {types} node types",
                    graphs.len(),
                    cfg.layers,
                    inputs.len()
                ),
            });
        }
        let mut h: Vec<Option<Var>> = inputs.iter().cloned().map(Some).collect();
        for (l, graph) in graphs.iter().enumerate() {
            h = self.layer(tape, l, &cfg.output_types(l), &h, params, graph, mode)?;
        }
        h.swap_remove(cfg.target).ok_or_else(|| Error::Mismatch {
            what: "a relational model's output",
            detail: "the last layer computed no rows of the target type".into(),
        })
    }

    /// Layer `l` over `graph`: the activated output of each type `t` with `types[t]` (a subset
    /// of [`HeteroModelConfig::output_types`]) from the inputs `h` (one per type, `None` for
    /// a type the layer before did not compute), `None` for the other types.
    #[allow(clippy::too_many_arguments)]
    pub fn layer(
        &self,
        tape: &mut Tape,
        l: usize,
        types: &[bool],
        h: &[Option<Var>],
        params: &[Var],
        graph: &HeteroLayerGraph,
        mode: Mode,
    ) -> Result<Vec<Option<Var>>> {
        let cfg = &self.cfg;
        let count = cfg.types.len();
        let last = l + 1 == cfg.layers;
        let outputs = cfg.output_types(l);
        let mut next: Vec<Option<Var>> = vec![None; count];
        for t in (0..count).filter(|&t| types[t]) {
            if !outputs[t] {
                return Err(Error::Mismatch {
                    what: "a relational layer's outputs",
                    detail: format!("layer {l} has no parameters for type {}", cfg.types[t]),
                });
            }
            let y = self.type_output(tape, l, t, h, params, graph)?;
            let dropout =
                (mode.training && !last && cfg.dropout.get() > 0.0).then(|| OutputDropout {
                    rule: Dropout {
                        p: cfg.dropout.get(),
                        key: RngKey::new(
                            mode.seed,
                            mode.step,
                            DROPOUT_PURPOSE + (l * count + t) as u64,
                        ),
                    },
                    row_ids: graph.output_ids(t),
                });
            let activation = if last {
                Activation::Identity
            } else {
                Activation::Relu
            };
            next[t] = Some(match y {
                (y, Some(bias)) => {
                    ops::bias_activation_dropout(tape, &y, &bias, activation, dropout)?
                }
                // No bias and nothing reaching the type: its output is zero.
                (y, None) => y,
            });
        }
        Ok(next)
    }

    /// Layer `l`'s output of type `t` before its bias and activation, with the bias (the sum
    /// of the relations' biases for R-SAGE; `None` when no parameter reaches the type, whose
    /// output is then zero).
    fn type_output(
        &self,
        tape: &mut Tape,
        l: usize,
        t: usize,
        h: &[Option<Var>],
        params: &[Var],
        graph: &HeteroLayerGraph,
    ) -> Result<(Var, Option<Var>)> {
        let cfg = &self.cfg;
        let layer = &self.layers[l];
        let rows = graph.num_dst[t];
        let input = |s: usize| {
            h[s].as_ref().ok_or_else(|| Error::Mismatch {
                what: "a relational layer's inputs",
                detail: format!(
                    "layer {l} reads type {} that no layer computed",
                    cfg.types[s]
                ),
            })
        };
        let own =
            |tape: &mut Tape| -> Result<Var> { Ok(ops::leading_rows(tape, input(t)?, rows)?) };
        let mut acc: Option<Var> = None;
        let mut bias: Option<Var> = None;
        if cfg.kind == RelationalKind::Rgcn {
            let p = &params[layer.types[t].clone()];
            let x = own(tape)?;
            acc = Some(ops::matmul(tape, &x, &p[0])?);
            bias = Some(p[1].clone());
        }
        for (r, rel) in cfg.relations.iter().enumerate() {
            if rel.dst_type != t {
                continue;
            }
            let p = &params[layer.relations[r].clone()];
            let x = input(rel.src_type)?;
            let weight = match cfg.num_bases {
                // W_r = sum_b a_rb V_b: the coefficients [1, B] times the bases [B, in * out].
                Some(_) => {
                    let width = x.value().dims2().1;
                    let basis = layer
                        .bases
                        .iter()
                        .find(|(w, _)| *w == width)
                        .map(|&(_, k)| &params[k])
                        .ok_or_else(|| Error::Mismatch {
                            what: "a relation's input and its layer's bases",
                            detail: format!("layer {l} has no bases for inputs {width} wide"),
                        })?;
                    let flat = ops::matmul(tape, &p[0], basis)?;
                    ops::reshape(tape, &flat, &[width, cfg.width_out(l)])?
                }
                None => p[0].clone(),
            };
            let aggregated = graph.relations[r].apply(tape, x)?;
            acc = Some(match acc {
                Some(a) => ops::add_matmul(tape, &a, &aggregated, &weight)?,
                None => ops::matmul(tape, &aggregated, &weight)?,
            });
            if cfg.kind == RelationalKind::Rsage {
                let x = own(tape)?;
                let a = acc.take().expect("set above");
                acc = Some(ops::add_matmul(tape, &a, &x, &p[2])?);
                bias = Some(match bias {
                    Some(b) => ops::add(tape, &b, &p[1])?,
                    None => p[1].clone(),
                });
            }
        }
        let out = match acc {
            Some(a) => a,
            None => Var::constant(Tensor::zeros(&[rows, cfg.width_out(l)], cfg.dtype)),
        };
        Ok((out, bias))
    }
}
