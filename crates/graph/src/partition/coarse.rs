//! The graph of the groups (a node per group, weighted by its nodes; an edge per pair of
//! linked groups, weighted by their links), split by METIS when it fits the memory it is
//! given: one level of the multilevel scheme, its finest level left to the streaming passes.

use super::groups::Groups;
use super::metis::{kway, metis_memory_bytes, METIS_MAX};
use crate::format::mapped::GraphData;
use crate::Result;

/// The part of every group by METIS on the graph of `groups`, or `None` when that graph needs
/// more than `max_bytes` (counted as it is built, METIS's own memory included) or more than
/// METIS's 32-bit indices, or has no more groups than parts. `load` is a node's weight,
/// `is_train` whether it is a training node.
pub(crate) fn split_groups(
    data: &GraphData<'_>,
    groups: &Groups,
    parts: usize,
    seed: u64,
    max_bytes: u64,
    load: &dyn Fn(usize) -> u64,
    is_train: &dyn Fn(usize) -> bool,
) -> Result<Option<Vec<u32>>> {
    let count = groups.count();
    if count <= parts || count > METIS_MAX {
        return Ok(None);
    }
    // Both directions of every link, so the graph is symmetric as METIS needs.
    let mut pairs: Vec<(u32, u32, u32)> = Vec::new();
    let mut links = vec![0u32; count];
    let mut touched: Vec<u32> = Vec::new();
    let fits = |pairs: usize| {
        (pairs * std::mem::size_of::<(u32, u32, u32)>()) as u64
            + metis_memory_bytes(count, pairs / 2)
            <= max_bytes
    };
    for g in 0..count {
        for &v in groups.members(g) {
            for &u in data.in_neighbors(v) {
                let h = groups.group_of[u as usize];
                if h as usize == g {
                    continue;
                }
                if links[h as usize] == 0 {
                    touched.push(h);
                }
                links[h as usize] = links[h as usize].saturating_add(1);
            }
        }
        for &h in &touched {
            let w = std::mem::take(&mut links[h as usize]);
            pairs.push((g as u32, h, w));
            pairs.push((h, g as u32, w));
        }
        touched.clear();
        if !fits(pairs.len()) {
            return Ok(None);
        }
    }
    drop(links);
    pairs.sort_unstable_by_key(|&(a, b, _)| (a, b));
    let mut xadj: Vec<metis::Idx> = vec![0; count + 1];
    let mut adjncy: Vec<metis::Idx> = Vec::new();
    let mut adjwgt: Vec<metis::Idx> = Vec::new();
    let mut last = None;
    for (a, b, w) in pairs {
        if last == Some((a, b)) {
            let sum = adjwgt.last_mut().expect("pushed with last");
            *sum = sum.saturating_add(w.min(METIS_MAX as u32) as metis::Idx);
            continue;
        }
        last = Some((a, b));
        adjncy.push(b as metis::Idx);
        adjwgt.push(w.min(METIS_MAX as u32) as metis::Idx);
        xadj[a as usize + 1] += 1;
    }
    if adjncy.len() > METIS_MAX {
        return Ok(None);
    }
    for g in 0..count {
        xadj[g + 1] += xadj[g];
    }
    let any_train = !data.train_idx.is_empty();
    let ncon = if any_train { 2 } else { 1 };
    let mut vwgt: Vec<metis::Idx> = Vec::with_capacity(count * ncon);
    for g in 0..count {
        let members = groups.members(g);
        let weight: u64 = members.iter().map(|&v| load(v as usize)).sum();
        vwgt.push(weight.min(METIS_MAX as u64) as metis::Idx);
        if any_train {
            let train = members.iter().filter(|&&v| is_train(v as usize)).count();
            vwgt.push(train as metis::Idx);
        }
    }
    kway(&xadj, &adjncy, Some(&adjwgt), &vwgt, ncon, parts, seed).map(Some)
}
