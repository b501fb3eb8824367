//! [`HeteroLayerGraph`]: the graph one relational layer runs over, the whole heterogeneous graph
//! or one sampled [`HeteroBlock`]: per relation, the mean over each destination's in-neighbours
//! of that relation (a bipartite aggregation from the source type's rows to the destination
//! type's), and per type, how many of its rows are outputs and which nodes its rows are.

use std::sync::Arc;

use graphloom_graph::sample::HeteroBlock;
use graphloom_graph::Csr;
use graphloom_tensor::memory::{category_scope, Category};

use super::model::RelationSpec;
use crate::kernels::aggregate::WeightedSum;
use crate::{GraphView, Result};

/// One relational layer's graph.
#[derive(Clone)]
pub struct HeteroLayerGraph {
    /// Per relation, the mean over its in-neighbours (rows of the destination type's outputs).
    pub(crate) relations: Vec<WeightedSum>,
    /// Per type, how many of its input rows are the layer's outputs (they come first).
    pub num_dst: Vec<usize>,
    /// Per type, the node id (within the type) of each input row; `None`: row `i` is node `i`.
    pub src_ids: Vec<Option<Arc<[i64]>>>,
}

impl HeteroLayerGraph {
    /// The whole graph: `csrs[r]` is relation `relations[r]`'s CSR by destination over all
    /// nodes of its destination type, `type_sizes` the nodes of each type. Every layer of a
    /// full-batch pass runs over this one graph. Charged to [`Category::Graph`].
    pub fn whole(
        relations: &[RelationSpec],
        csrs: &[&Csr],
        type_sizes: &[usize],
    ) -> Result<HeteroLayerGraph> {
        let _g = category_scope(Category::Graph);
        let aggregations = relations
            .iter()
            .zip(csrs)
            .map(|(r, csr)| mean(csr, type_sizes[r.src_type]))
            .collect::<Result<Vec<_>>>()?;
        Ok(HeteroLayerGraph {
            relations: aggregations,
            num_dst: type_sizes.to_vec(),
            src_ids: vec![None; type_sizes.len()],
        })
    }

    /// The graph of one sampled block (its relations in `relations`' order).
    pub fn from_block(relations: &[RelationSpec], block: &HeteroBlock) -> Result<HeteroLayerGraph> {
        let _g = category_scope(Category::Graph);
        let aggregations = relations
            .iter()
            .zip(&block.relations)
            .map(|(r, b)| {
                let csr = Csr {
                    row_ptr: b.row_ptr.clone(),
                    col_idx: b.col_idx.clone(),
                };
                mean(&csr, block.src_nodes[r.src_type].len())
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(HeteroLayerGraph {
            relations: aggregations,
            num_dst: block.num_dst.clone(),
            src_ids: block
                .src_nodes
                .iter()
                .map(|nodes| Some(nodes.iter().map(|&v| i64::from(v)).collect()))
                .collect(),
        })
    }

    /// The node ids of type `t`'s output rows, for dropout keys (`None`: row `i` is node `i`).
    pub(crate) fn output_ids(&self, t: usize) -> Option<Arc<[i64]>> {
        self.src_ids[t]
            .as_ref()
            .map(|ids| ids[..self.num_dst[t]].into())
    }
}

/// The mean over each destination's in-edges of `csr`, reading `sources` rows.
fn mean(csr: &Csr, sources: usize) -> Result<WeightedSum> {
    Ok(WeightedSum::mean(Arc::new(GraphView::bipartite(
        csr, sources,
    )?)))
}
