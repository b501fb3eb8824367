//! `graphloom bench cache`: which rows a feature cache of a given size should keep, decided
//! on the stream of rows sampled training gathers. The bench samples mini-batches of a graph
//! generated in memory (no disk, no features: only the rows each batch asks for) and replays
//! each batch's rows through two policies of the same number of slots: today's static cache
//! of the rows of highest in-degree (`--feature-cache-gib`) and SIEVE (`graphloom_store::Sieve`),
//! which admits every miss and evicts by a hand that spares recently hit rows. Hit rates are
//! counted after a tenth of the batches (SIEVE starts empty), on both graph shapes of
//! `bench scale`: the realistic power-law one stored both ways and the directed R-MAT one.
//! Belady's policy, which knows every future access (evict the row used again last; admit a
//! miss only when it is used again sooner), bounds what any policy, a look-ahead one
//! included, can reach with the same slots.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use graphloom_convert::synthetic::{generate, EdgeModel, SplitSizes, SyntheticConfig};
use graphloom_graph::sample::{Fanouts, Sampler, SamplerKind};
use graphloom_graph::NodeId;
use graphloom_nn::batches::epoch_batches;
use graphloom_store::{Access, Sieve};
use serde_json::json;

/// Arguments of `graphloom bench cache`.
#[derive(Args)]
pub(crate) struct CacheArgs {
    /// Nodes of each generated graph.
    #[arg(long, default_value_t = 2_000_000)]
    nodes: usize,
    /// Graph shapes: realistic (power-law, every edge both ways, average degree 29) and
    /// rmat-directed (R-MAT, 14.5 directed edges per node): ogbn-papers100M's two shapes of
    /// `bench scale`.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "realistic,rmat-directed"
    )]
    shapes: Vec<CacheShape>,
    /// Cache sizes as shares of the rows.
    #[arg(long, value_delimiter = ',', default_value = "0.05,0.15,0.3")]
    capacities: Vec<f64>,
    /// Share of the nodes that are training seeds (ogbn-papers100M: 1.1%).
    #[arg(long, default_value_t = 0.011)]
    train_share: f64,
    /// Batches replayed (the first tenth warm the caches up).
    #[arg(long, default_value_t = 300)]
    batches: usize,
    /// Seeds per batch.
    #[arg(long, default_value_t = 1024)]
    batch_size: usize,
    /// Neighbours per hop.
    #[arg(long, value_delimiter = ',', default_value = "15,10,5")]
    fanouts: Vec<i64>,
    /// Print one JSON object per measurement per line.
    #[arg(long)]
    json: bool,
}

/// A graph shape of the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CacheShape {
    /// Power-law degrees, every edge stored both ways.
    Realistic,
    /// Directed R-MAT.
    RmatDirected,
}

impl CacheShape {
    fn name(self) -> &'static str {
        match self {
            CacheShape::Realistic => "realistic",
            CacheShape::RmatDirected => "rmat-directed",
        }
    }

    /// ogbn-papers100M's edges per node, in this shape.
    fn config(self, nodes: usize, train: usize) -> SyntheticConfig {
        let (edges, avg_degree, edge_model) = match self {
            CacheShape::Realistic => (None, 29, EdgeModel::PowerLaw),
            CacheShape::RmatDirected => (Some(nodes * 29 / 2), 0, EdgeModel::Rmat),
        };
        SyntheticConfig {
            nodes,
            avg_degree,
            edges,
            feat_dim: 0,
            classes: 2,
            edge_model,
            split: SplitSizes::Counts(train, 0, 0),
            ..Default::default()
        }
    }
}

pub(crate) fn run(args: CacheArgs) -> Result<()> {
    if args.batches < 10 || args.batch_size == 0 {
        bail!("--batches must be at least 10 and --batch-size positive");
    }
    if let Some(c) = args.capacities.iter().find(|c| !(0.0..=1.0).contains(*c)) {
        bail!("--capacities: {c} is not a share of the rows (0 to 1)");
    }
    if !(args.train_share > 0.0 && args.train_share <= 1.0) {
        bail!(
            "--train-share: {} is not a share (0 to 1]",
            args.train_share
        );
    }
    let fanouts = Fanouts::new(args.fanouts.clone())?;
    let warmup = args.batches / 10;
    for &shape in &args.shapes {
        let start = Instant::now();
        let train = ((args.nodes as f64 * args.train_share) as usize).max(1);
        let ds = generate(&shape.config(args.nodes, train))?;
        let data = ds.data();
        eprintln!(
            "{}: {} nodes, {} edges, generated in {:.1} s; sampling {} batches",
            shape.name(),
            data.num_nodes(),
            data.num_edges(),
            start.elapsed().as_secs_f64(),
            args.batches
        );
        let stream = sampled_rows(&data, &fanouts, &args)?;
        for &share in &args.capacities {
            let slots = (share * args.nodes as f64) as usize;
            let hot = data.highest_in_degree(slots);
            let mut is_hot = vec![false; args.nodes];
            for &v in &hot {
                is_hot[v as usize] = true;
            }
            let mut sieve = Sieve::new(args.nodes, slots);
            let (mut rows, mut static_hits, mut sieve_hits) = (0u64, 0u64, 0u64);
            for (k, batch) in stream.batches().enumerate() {
                let counted = k >= warmup;
                for &v in batch {
                    let hit = matches!(sieve.access(v), Access::Hit(_));
                    if counted {
                        rows += 1;
                        static_hits += u64::from(is_hot[v as usize]);
                        sieve_hits += u64::from(hit);
                    }
                }
            }
            let belady_hits = belady_hits(&stream, args.nodes, slots, warmup);
            let rate = |hits: u64| hits as f64 / rows.max(1) as f64;
            let record = json!({
                "shape": shape.name(),
                "nodes": args.nodes,
                "edges": data.num_edges(),
                "capacity_share": share,
                "rows_gathered": rows,
                "static_hit_rate": rate(static_hits),
                "sieve_hit_rate": rate(sieve_hits),
                "belady_hit_rate": rate(belady_hits),
                "sieve_vs_static": rate(sieve_hits) / rate(static_hits).max(f64::MIN_POSITIVE),
            });
            if args.json {
                crate::host::print_record(&record, None);
            } else {
                println!(
                    "{:<14} cache {:>5.1}% of rows: static (in-degree) {:>5.1}% hits, SIEVE \
                     {:>5.1}%, Belady (all future known) {:>5.1}%",
                    shape.name(),
                    100.0 * share,
                    100.0 * rate(static_hits),
                    100.0 * rate(sieve_hits),
                    100.0 * rate(belady_hits)
                );
            }
        }
    }
    Ok(())
}

/// The rows of the sampled batches, one after the other.
struct Stream {
    rows: Vec<NodeId>,
    /// Where each batch starts in `rows`, and the end.
    starts: Vec<usize>,
}

impl Stream {
    fn batches(&self) -> impl Iterator<Item = &[NodeId]> {
        self.starts.windows(2).map(|w| &self.rows[w[0]..w[1]])
    }
}

/// The hits of Belady's policy with `slots` slots on `stream`, counted from batch `warmup`:
/// every row kept until one used again later is needed, a miss admitted only when it is used
/// again before the row the cache would evict.
fn belady_hits(stream: &Stream, nodes: usize, slots: usize, warmup: usize) -> u64 {
    const NEVER: usize = usize::MAX;
    // The position of each access's next access to the same row.
    let mut next = vec![NEVER; stream.rows.len()];
    let mut seen = vec![NEVER; nodes];
    for (i, &v) in stream.rows.iter().enumerate().rev() {
        next[i] = seen[v as usize];
        seen[v as usize] = i;
    }
    let counted_from = stream.starts[warmup.min(stream.starts.len() - 1)];
    // The cached rows by their next use; `due` is each cached row's key.
    let mut cached: BTreeSet<(usize, NodeId)> = BTreeSet::new();
    let mut due = vec![None; nodes];
    let mut hits = 0u64;
    for (i, &v) in stream.rows.iter().enumerate() {
        if let Some(at) = due[v as usize].take() {
            cached.remove(&(at, v));
            hits += u64::from(i >= counted_from);
        } else if slots == 0 || next[i] == NEVER {
            continue;
        } else if cached.len() == slots {
            let &(latest, u) = cached.last().expect("full");
            if latest <= next[i] {
                continue;
            }
            cached.pop_last();
            due[u as usize] = None;
        }
        if next[i] != NEVER {
            cached.insert((next[i], v));
            due[v as usize] = Some(next[i]);
        }
    }
    hits
}

/// The distinct input rows of each sampled batch, in the order a gather asks for them.
fn sampled_rows(
    data: &graphloom_graph::GraphData<'_>,
    fanouts: &Fanouts,
    args: &CacheArgs,
) -> Result<Stream> {
    let mut sampler = Sampler::new(data.num_nodes());
    let mut stream = Stream {
        rows: Vec::new(),
        starts: vec![0],
    };
    let mut epoch = 0;
    while stream.starts.len() <= args.batches {
        for batch in epoch_batches(data.train_idx, 0, epoch, args.batch_size, 0, 1) {
            if stream.starts.len() > args.batches {
                break;
            }
            let blocks = sampler.sample(
                &data.source(),
                &batch,
                fanouts,
                SamplerKind::Uniform,
                0,
                epoch,
            )?;
            stream.rows.extend_from_slice(&blocks[0].src_nodes);
            stream.starts.push(stream.rows.len());
        }
        epoch += 1;
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use graphloom_tensor::rng::RngKey;

    /// The most hits any policy of `slots` slots (admitting or bypassing each miss, evicting
    /// any row) gets on `rows`, by exhaustive search.
    fn best_hits(rows: &[NodeId], slots: usize, cache: &mut Vec<NodeId>) -> u64 {
        let Some((&v, rest)) = rows.split_first() else {
            return 0;
        };
        if cache.contains(&v) {
            return 1 + best_hits(rest, slots, cache);
        }
        // Bypass the miss.
        let mut best = best_hits(rest, slots, cache);
        if cache.len() < slots {
            cache.push(v);
            best = best.max(best_hits(rest, slots, cache));
            cache.pop();
        } else {
            for k in 0..cache.len() {
                let evicted = std::mem::replace(&mut cache[k], v);
                best = best.max(best_hits(rest, slots, cache));
                cache[k] = evicted;
            }
        }
        best
    }

    #[test]
    fn belady_gets_the_most_hits_any_policy_can() {
        let key = RngKey::new(9, 0, 0xbe1a);
        for case in 0..40u64 {
            let len = 6 + (case % 7) as usize;
            let nodes = 3 + (case % 4) as usize;
            let rows: Vec<NodeId> = (0..len)
                .map(|i| (key.bits(case, i as u64) % nodes as u64) as NodeId)
                .collect();
            let stream = Stream {
                starts: vec![0, rows.len()],
                rows: rows.clone(),
            };
            for slots in 0..=3 {
                assert_eq!(
                    belady_hits(&stream, nodes, slots, 0),
                    best_hits(&rows, slots, &mut Vec::new()),
                    "rows {rows:?}, {slots} slots"
                );
            }
        }
    }
}
