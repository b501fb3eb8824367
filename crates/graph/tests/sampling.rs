//! Neighbour sampling: uniform and weighted inclusion checked by chi-square tests against exact
//! probabilities (with a biased sampler as negative control), structural checks of the blocks,
//! and the same batches for any thread count and any number of ranks holding the graph.

use std::collections::HashMap;
use std::sync::Arc;

use graphloom_comm::{Communicator, Local};
use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::sample::{
    below, uniform_positions, weighted_positions, Block, CsrSource, NeighborSource, Relabeler,
    Sampler, SamplerKind,
};
use graphloom_graph::{Csr, StoreGraph};
use graphloom_store::{Layout, Location};
use graphloom_tensor::rng::{RngKey, RowKey};

/// Significance level of every chi-square test: a correct sampler fails a given fixed-seed test
/// with probability 1e-3, and the biased controls must fail it.
const ALPHA: f64 = 1e-3;

/// ln Gamma(x) (Lanczos, g = 7), accurate to about 1e-14 for x > 0.
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let t = x + 7.5;
    let sum: f64 = C[1..]
        .iter()
        .enumerate()
        .map(|(i, c)| c / (x + i as f64 + 1.0))
        .sum::<f64>()
        + C[0];
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// P(X > x) for X chi-square with `dof` degrees of freedom: the regularised upper incomplete
/// gamma Q(dof/2, x/2), by its series below a + 1 and its continued fraction above.
fn chi2_sf(x: f64, dof: usize) -> f64 {
    let (a, x) = (dof as f64 / 2.0, x / 2.0);
    if x <= 0.0 {
        return 1.0;
    }
    let front = (a * x.ln() - x - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut term, mut sum, mut n) = (1.0 / a, 1.0 / a, a);
        while term > sum * 1e-16 {
            n += 1.0;
            term *= x / n;
            sum += term;
        }
        1.0 - front * sum
    } else {
        // Lentz's method for the continued fraction of Q.
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..1000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            d = if d.abs() < tiny { tiny } else { d };
            c = b + an / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            let step = d * c;
            h *= step;
            if (step - 1.0).abs() < 1e-15 {
                break;
            }
        }
        front * h
    }
}

#[test]
fn chi2_survival_matches_known_quantiles() {
    // 0.999 quantiles: 19 dof 43.82, 9 dof 27.88; 0.5 quantile of 2 dof is 2 ln 2.
    assert!((chi2_sf(43.82, 19) - 1e-3).abs() < 2e-5);
    assert!((chi2_sf(27.88, 9) - 1e-3).abs() < 2e-5);
    assert!((chi2_sf(2.0 * 2f64.ln(), 2) - 0.5).abs() < 1e-12);
    assert!((chi2_sf(1.0, 5) - 0.962_565_773_201_0).abs() < 1e-9);
}

/// The p-value of observed subset counts against exact probabilities.
fn p_value(counts: &HashMap<u32, u64>, expected: &HashMap<u32, f64>, draws: u64) -> f64 {
    assert!(
        counts.keys().all(|k| expected.contains_key(k)),
        "a subset that cannot occur"
    );
    let stat: f64 = expected
        .iter()
        .map(|(k, p)| {
            let e = p * draws as f64;
            let o = *counts.get(k).unwrap_or(&0) as f64;
            (o - e).powi(2) / e
        })
        .sum();
    chi2_sf(stat, expected.len() - 1)
}

/// Counts the subsets (as bit masks of positions) that `pick` draws for `draws` nodes.
fn subset_counts(draws: u64, mut pick: impl FnMut(RowKey, &mut Vec<u32>)) -> HashMap<u32, u64> {
    let key = RngKey::new(11, 2, 3);
    let mut counts = HashMap::new();
    let mut out = Vec::new();
    for node in 0..draws {
        out.clear();
        pick(key.row(node), &mut out);
        let mut seen = 0u32;
        for &p in &out {
            assert_eq!(seen & (1 << p), 0, "duplicate position {p}");
            seen |= 1 << p;
        }
        *counts.entry(seen).or_insert(0) += 1;
    }
    counts
}

/// All k-subsets of 0..d as bit masks.
fn subsets(d: u32, k: u32) -> Vec<u32> {
    (0u32..1 << d).filter(|m| m.count_ones() == k).collect()
}

#[test]
fn uniform_subsets_are_equally_likely_and_a_biased_sampler_fails() {
    let (d, k, draws) = (6, 3, 60_000);
    let expected: HashMap<u32, f64> = subsets(d, k).into_iter().map(|m| (m, 1.0 / 20.0)).collect();
    let counts = subset_counts(draws, |key, out| {
        uniform_positions(d as usize, k as usize, key, out)
    });
    let p = p_value(&counts, &expected, draws);
    assert!(p > ALPHA, "uniform sampler rejected: p = {p}");

    // Negative control: Floyd's algorithm fed 3-bit draws reduced modulo the range.
    let biased = subset_counts(draws, |key, out| {
        for j in (d - k) as usize..d as usize {
            let t = ((key.bits(j as u64) & 7) % (j as u64 + 1)) as u32;
            out.push(if out.contains(&t) { j as u32 } else { t });
        }
    });
    let p = p_value(&biased, &expected, draws);
    assert!(p < ALPHA, "the biased control passed: p = {p}");

    // Small neighbourhoods are taken whole.
    let mut out = Vec::new();
    uniform_positions(3, 5, RngKey::new(0, 0, 0).row(1), &mut out);
    assert_eq!(out, vec![0, 1, 2]);
}

/// Floyd's algorithm as written in the literature: a list of kept positions, sorted at the end.
fn floyd_reference(degree: usize, k: usize, key: RowKey) -> Vec<u32> {
    if degree <= k {
        return (0..degree as u32).collect();
    }
    let mut kept: Vec<u32> = Vec::new();
    for j in degree - k..degree {
        let t = below(j + 1, key.bits(j as u64)) as u32;
        kept.push(if kept.contains(&t) { j as u32 } else { t });
    }
    kept.sort_unstable();
    kept
}

#[test]
fn uniform_positions_are_floyds_choice_at_every_degree() {
    // Degrees on both sides of every bitmap word and of the largest bitmap, and fanouts from
    // one to more than a word.
    let key = RngKey::new(5, 1, 9);
    let mut out = Vec::new();
    for degree in (1..=200).chain([255, 256, 257, 511, 512, 513, 1000, 5000]) {
        for k in [1, 2, 10, 15, 25, 63, 64, 65, 130] {
            for node in 0..20 {
                out.clear();
                out.push(u32::MAX); // positions are appended after what `out` holds
                uniform_positions(degree, k, key.row(node), &mut out);
                let expected = floyd_reference(degree, k, key.row(node));
                assert_eq!(
                    &out[1..],
                    &expected[..],
                    "degree {degree}, k {k}, node {node}"
                );
            }
        }
    }
}

#[test]
fn relabeling_numbers_nodes_in_order_of_first_appearance_and_forgets_them() {
    // Against a map filled one node at a time: node lists with many repeats (ids below 300),
    // most after a frontier of distinct nodes inserted one by one, over rounds that reuse
    // the table after `finish`.
    let key = RngKey::new(3, 0, 11);
    let mut relabel = Relabeler::new(300);
    for round in 0..50u64 {
        let frontier: Vec<u32> = (0..round % 7)
            .map(|i| (round * 31 + i * 17) as u32 % 300)
            .collect();
        let len = 1 + key.row(round).bits(0) as usize % 2000;
        let nodes: Vec<u32> = (0..len)
            .map(|i| below(300, key.row(round).bits(i as u64 + 1)) as u32)
            .collect();
        let mut expected_ids = HashMap::new();
        let mut expected_order = Vec::new();
        let mut number = |node: u32| {
            let next = expected_ids.len() as u32;
            *expected_ids.entry(node).or_insert_with(|| {
                expected_order.push(node);
                next
            })
        };
        for &v in &frontier {
            assert_eq!(
                relabel.insert(v),
                number(v),
                "round {round}, frontier node {v}"
            );
        }
        let expected: Vec<u32> = nodes.iter().map(|&v| number(v)).collect();
        assert_eq!(relabel.insert_all(&nodes), expected, "round {round}");
        assert_eq!(relabel.finish(), expected_order, "round {round}");
    }
}

/// Exact probability that successive weighted sampling without replacement of two items
/// draws the pair `mask`.
fn pair_probability(weights: &[f64], mask: u32) -> f64 {
    let total: f64 = weights.iter().sum();
    let idx: Vec<usize> = (0..weights.len())
        .filter(|i| mask & (1 << i) != 0)
        .collect();
    let (a, b) = (weights[idx[0]], weights[idx[1]]);
    a / total * b / (total - a) + b / total * a / (total - b)
}

#[test]
fn weighted_inclusion_is_exact_a_res_and_the_k_w_over_w_shortcut_fails() {
    let w = [1.0f32, 2.0, 3.0, 4.0, 10.0];
    let wf: Vec<f64> = w.iter().map(|&x| f64::from(x)).collect();
    let draws = 60_000;
    let expected: HashMap<u32, f64> = subsets(5, 2)
        .into_iter()
        .map(|m| (m, pair_probability(&wf, m)))
        .collect();
    assert!((expected.values().sum::<f64>() - 1.0).abs() < 1e-12);
    let mut scratch = Vec::new();
    let counts = subset_counts(draws, |key, out| {
        weighted_positions(&w, 2, key, &mut scratch, out)
    });
    let p = p_value(&counts, &expected, draws);
    assert!(p > ALPHA, "A-Res sampler rejected: p = {p}");

    // Negative control: pairs drawn with probability proportional to the product of their
    // weights, which gives each item an inclusion close to k * w / W but is not A-Res.
    let masks = subsets(5, 2);
    let weights: Vec<f64> = masks
        .iter()
        .map(|m| {
            (0..5)
                .filter(|i| m & (1 << i) != 0)
                .map(|i| wf[i])
                .product()
        })
        .collect();
    let total: f64 = weights.iter().sum();
    let biased = subset_counts(draws, |key, out| {
        let mut u = (key.bits(0) >> 11) as f64 / (1u64 << 53) as f64 * total;
        let mut chosen = masks[masks.len() - 1];
        for (m, wt) in masks.iter().zip(&weights) {
            if u < *wt {
                chosen = *m;
                break;
            }
            u -= wt;
        }
        out.extend((0..5).filter(|i| chosen & (1 << i) != 0));
    });
    let p = p_value(&biased, &expected, draws);
    assert!(p < ALPHA, "the product-weight control passed: p = {p}");
}

#[test]
fn below_is_uniform_over_a_small_range() {
    let key = RngKey::new(5, 0, 0);
    let mut counts = [0u64; 7];
    for i in 0..70_000 {
        counts[below(7, key.bits(i, 0))] += 1;
    }
    let stat: f64 = counts
        .iter()
        .map(|&c| (c as f64 - 10_000.0).powi(2) / 10_000.0)
        .sum();
    assert!(chi2_sf(stat, 6) > ALPHA);
}

fn graph() -> Csr {
    let ds = generate(&SyntheticConfig {
        nodes: 2000,
        avg_degree: 8,
        feat_dim: 1,
        classes: 2,
        seed: 4,
        ..Default::default()
    })
    .unwrap();
    ds.graph
}

fn weights(g: &Csr) -> Vec<f32> {
    (0..g.num_edges()).map(|e| (e % 7) as f32 * 0.5).collect()
}

/// Every block edge is an edge of the graph with the right id; no neighbour twice; fanouts are
/// respected and small neighbourhoods taken whole; blocks chain.
fn check_blocks(g: &Csr, blocks: &[Block], seeds: &[u32], fanouts: &[i64]) {
    assert_eq!(blocks.last().unwrap().dst_nodes(), seeds);
    for (layer, block) in blocks.iter().enumerate() {
        let fanout = fanouts[fanouts.len() - 1 - layer];
        if layer + 1 < blocks.len() {
            assert_eq!(blocks[layer + 1].src_nodes.len(), block.num_dst);
            assert_eq!(
                blocks[layer + 1].src_nodes,
                block.src_nodes[..block.num_dst].to_vec()
            );
        }
        for i in 0..block.num_dst {
            let dst = block.src_nodes[i] as usize;
            let (s, e) = (block.row_ptr[i] as usize, block.row_ptr[i + 1] as usize);
            let degree = g.in_degree(dst);
            let want = if fanout < 0 {
                degree
            } else {
                degree.min(fanout as usize)
            };
            assert_eq!(e - s, want, "node {dst}");
            let mut ids: Vec<i64> = block.edge_ids[s..e].to_vec();
            for k in s..e {
                let edge = block.edge_ids[k];
                assert!((g.row_ptr[dst]..g.row_ptr[dst + 1]).contains(&edge));
                assert_eq!(
                    g.col_idx[edge as usize],
                    block.src_nodes[block.col_idx[k] as usize]
                );
            }
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), e - s, "an edge sampled twice");
        }
        let mut unique = block.src_nodes.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            block.src_nodes.len(),
            "a node twice among the sources"
        );
    }
}

fn seeds() -> Vec<u32> {
    (0..300u32).map(|i| (i * 613) % 2000).collect()
}

#[test]
fn blocks_hold_graph_edges_without_repeats() {
    let g = graph();
    let w = weights(&g);
    let mut sampler = Sampler::new(g.num_nodes());
    for (kind, source) in [
        (SamplerKind::Uniform, CsrSource::new(&g)),
        (SamplerKind::Weighted, CsrSource::weighted(&g, &w).unwrap()),
    ] {
        for fanouts in [vec![5, 3], vec![-1, 2], vec![4, 4, 4]] {
            let blocks = sampler
                .sample(&source, &seeds(), &fanouts, kind, 1, 0)
                .unwrap();
            check_blocks(&g, &blocks, &seeds(), &fanouts);
        }
    }
    // Bad input.
    assert!(sampler
        .sample(
            &CsrSource::new(&g),
            &[2000],
            &[5],
            SamplerKind::Uniform,
            1,
            0
        )
        .is_err());
    assert!(sampler
        .sample(
            &CsrSource::new(&g),
            &[1, 1],
            &[5],
            SamplerKind::Uniform,
            1,
            0
        )
        .is_err());
    assert!(sampler
        .sample(&CsrSource::new(&g), &[1], &[-2], SamplerKind::Uniform, 1, 0)
        .is_err());
    // A fanout of 0 (`Fanouts::rows`: a model that reads no graph) draws no neighbour.
    let rows = sampler
        .sample(
            &CsrSource::new(&g),
            &[1, 3],
            &[0, 0],
            SamplerKind::Uniform,
            1,
            0,
        )
        .unwrap();
    for block in &rows {
        assert_eq!(
            (block.src_nodes.as_slice(), block.col_idx.len()),
            (&[1, 3][..], 0)
        );
    }
    assert!(sampler
        .sample(&CsrSource::new(&g), &[1], &[5], SamplerKind::Weighted, 1, 0)
        .is_err());
    assert!(CsrSource::weighted(&g, &w[1..]).is_err());
}

#[test]
fn batches_do_not_depend_on_the_thread_count() {
    let g = graph();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut sampler = Sampler::new(g.num_nodes());
            sampler
                .sample(
                    &CsrSource::new(&g),
                    &seeds(),
                    &[7, 5],
                    SamplerKind::Uniform,
                    3,
                    9,
                )
                .unwrap()
        })
    };
    assert_eq!(run(1), run(2));
    // And they do depend on the epoch.
    let mut sampler = Sampler::new(g.num_nodes());
    let other = sampler
        .sample(
            &CsrSource::new(&g),
            &seeds(),
            &[7, 5],
            SamplerKind::Uniform,
            3,
            10,
        )
        .unwrap();
    assert_ne!(run(1), other);
}

/// The graph in the store, in `layout`, sampled by every rank: the same blocks as in memory.
fn same_blocks_from_the_store(
    comm: Arc<dyn Communicator>,
    layout: Layout,
) -> graphloom_graph::Result<()> {
    let g = graph();
    let w = weights(&g);
    let stored = StoreGraph::from_csr(comm, &g, Some(&w), layout, &Location::Host)?;
    let mut sampler = Sampler::new(g.num_nodes());
    for (kind, mem) in [
        (SamplerKind::Uniform, CsrSource::new(&g)),
        (SamplerKind::Weighted, CsrSource::weighted(&g, &w)?),
    ] {
        let want = sampler.sample(&mem, &seeds(), &[6, 4], kind, 2, 1)?;
        let got = sampler.sample(&stored, &seeds(), &[6, 4], kind, 2, 1)?;
        assert_eq!(got, want, "{layout} {kind:?}");
    }
    assert_eq!(
        stored.degrees(&[0, 5, 1999])?,
        vec![g.in_degree(0), g.in_degree(5), g.in_degree(1999)]
    );
    assert_eq!(stored.to_csr()?, g);
    assert_eq!(stored.to_undirected()?.to_csr()?, g.to_undirected_simple());
    let looped = stored.with_self_loops()?.to_csr()?;
    for v in 0..g.num_nodes() {
        assert_eq!(
            looped
                .in_neighbors(v)
                .iter()
                .filter(|&&u| u as usize == v)
                .count(),
            1
        );
    }
    assert_eq!(stored.num_nodes(), NeighborSource::num_nodes(&stored));
    Ok(())
}

#[test]
fn batches_do_not_depend_on_the_ranks_holding_the_graph() {
    for ranks in [1, 2, 4] {
        for layout in Layout::ALL {
            for r in Local::run(ranks, |comm| same_blocks_from_the_store(comm, layout)) {
                r.unwrap();
            }
        }
    }
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;
    use graphloom_comm::launch::expect_test_under_mpirun;

    #[test]
    #[ignore = "one rank of an mpirun job, started by the mpi_ tests"]
    fn rank_same_blocks_from_the_store() {
        graphloom_comm::mpi::run_rank(|comm| same_blocks_from_the_store(comm, Layout::Distributed))
            .unwrap();
    }

    #[test]
    fn mpi_batches_do_not_depend_on_the_ranks_holding_the_graph() {
        for np in [2, 4] {
            expect_test_under_mpirun(np, "mpi::rank_same_blocks_from_the_store");
        }
    }
}
