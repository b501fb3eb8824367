//! Heterogeneous sampling: each relation's fanout per hop, every sampled edge a real one, each
//! type's destinations first, and the draws fixed by the seed.

use graphloom_graph::sample::{CsrSource, HeteroSampler, RelationSource};
use graphloom_graph::{Csr, NodeId};

/// Two types: `a` (50 nodes) and `b` (30 nodes). `b -> a`: node `v` of `a` has the
/// in-neighbours `v % 30 .. v % 30 + v % 9` of `b` (wrapping); `a -> b`: node `u` of `b` has
/// every `a` node `v` with `v % 30 == u`; `a -> a`: `v` has `v + 1` and `v + 2` (mod 50).
fn graph() -> (Vec<usize>, Vec<(usize, usize)>, Vec<Csr>) {
    let (mut s, mut d) = (Vec::new(), Vec::new());
    for v in 0..50u32 {
        for k in 0..v % 9 {
            s.push((v % 30 + k) % 30);
            d.push(v);
        }
    }
    let b_to_a = Csr::from_edges(50, &s, &d);
    let (s, d): (Vec<NodeId>, Vec<NodeId>) = (0..50u32).map(|v| (v, v % 30)).unzip();
    let a_to_b = Csr::from_edges(30, &s, &d);
    let (s, d): (Vec<NodeId>, Vec<NodeId>) = (0..50u32)
        .flat_map(|v| [((v + 1) % 50, v), ((v + 2) % 50, v)])
        .unzip();
    let a_to_a = Csr::from_edges(50, &s, &d);
    (
        vec![50, 30],
        vec![(1, 0), (0, 1), (0, 0)],
        vec![b_to_a, a_to_b, a_to_a],
    )
}

#[test]
fn each_relation_takes_its_own_fanout_of_real_edges_per_hop() {
    let (sizes, types, csrs) = graph();
    let sources: Vec<CsrSource<'_>> = csrs.iter().map(CsrSource::new).collect();
    let relations: Vec<RelationSource<'_>> = types
        .iter()
        .zip(&sources)
        .map(|(&(src_type, dst_type), graph)| RelationSource {
            src_type,
            dst_type,
            graph,
        })
        .collect();
    let seeds: Vec<NodeId> = vec![17, 8, 44, 3];
    // Hop 0 (seeds outwards): b -> a takes 3, a -> b all, a -> a 1; hop 1: 2, 1, all.
    let fanouts = vec![vec![3, -1, 1], vec![2, 1, -1]];
    let blocks = HeteroSampler::new(&sizes)
        .sample(&relations, 0, &seeds, &fanouts, 9, 0)
        .unwrap();
    assert_eq!(blocks.len(), 2);
    // The last block's destinations are the seeds, and no `b` node.
    let last = &blocks[1];
    assert_eq!(last.num_dst, vec![4, 0]);
    assert_eq!(&last.src_nodes[0][..4], &seeds[..]);
    // Each block's destinations are the sources of the block after it, type by type.
    for t in 0..2 {
        assert_eq!(blocks[0].num_dst[t], last.src_nodes[t].len());
        assert_eq!(
            &blocks[0].src_nodes[t][..blocks[0].num_dst[t]],
            &last.src_nodes[t][..]
        );
    }
    for (hop, block) in [&blocks[1], &blocks[0]].into_iter().enumerate() {
        for (r, rel) in block.relations.iter().enumerate() {
            let (src_type, dst_type) = types[r];
            assert_eq!(rel.row_ptr.len(), block.num_dst[dst_type] + 1);
            for i in 0..block.num_dst[dst_type] {
                let v = block.src_nodes[dst_type][i] as usize;
                let truth = csrs[r].in_neighbors(v);
                let row = &rel.col_idx[rel.row_ptr[i] as usize..rel.row_ptr[i + 1] as usize];
                let want = match fanouts[hop][r] {
                    -1 => truth.len(),
                    f => truth.len().min(f as usize),
                };
                assert_eq!(row.len(), want, "hop {hop}, relation {r}, node {v}");
                let seen: Vec<NodeId> = row
                    .iter()
                    .map(|&l| block.src_nodes[src_type][l as usize])
                    .collect();
                // Sampled without replacement: distinct positions of real in-edges.
                let mut left = truth.to_vec();
                for u in &seen {
                    let k = left
                        .iter()
                        .position(|x| x == u)
                        .expect("a real in-neighbour");
                    left.swap_remove(k);
                }
            }
        }
    }
    // The same seed draws the same blocks; another draws others.
    let again = HeteroSampler::new(&sizes)
        .sample(&relations, 0, &seeds, &fanouts, 9, 0)
        .unwrap();
    assert_eq!(again, blocks);
    let other = HeteroSampler::new(&sizes)
        .sample(&relations, 0, &seeds, &fanouts, 10, 0)
        .unwrap();
    assert_ne!(other, blocks);
}

#[test]
fn repeated_seeds_and_mismatched_fanouts_are_refused() {
    let (sizes, types, csrs) = graph();
    let sources: Vec<CsrSource<'_>> = csrs.iter().map(CsrSource::new).collect();
    let relations: Vec<RelationSource<'_>> = types
        .iter()
        .zip(&sources)
        .map(|(&(src_type, dst_type), graph)| RelationSource {
            src_type,
            dst_type,
            graph,
        })
        .collect();
    let mut sampler = HeteroSampler::new(&sizes);
    let err = sampler
        .sample(&relations, 0, &[1, 1], &[vec![2, 2, 2]], 0, 0)
        .unwrap_err();
    assert!(err.to_string().contains("distinct"), "{err}");
    let err = sampler
        .sample(&relations, 0, &[1], &[vec![2, 2]], 0, 0)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("2 fanouts for a hop over 3 relations"),
        "{err}"
    );
    let err = sampler
        .sample(&relations, 0, &[50], &[vec![2, 2, 2]], 0, 0)
        .unwrap_err();
    assert!(err.to_string().contains("seed node 50"), "{err}");
    // The sampler is left clean: a good batch after the refusals samples as a fresh one does.
    let good = sampler
        .sample(&relations, 0, &[5], &[vec![2, 2, 2]], 0, 0)
        .unwrap();
    let fresh = HeteroSampler::new(&sizes)
        .sample(&relations, 0, &[5], &[vec![2, 2, 2]], 0, 0)
        .unwrap();
    assert_eq!(good, fresh);
}
