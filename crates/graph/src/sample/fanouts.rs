//! [`Fanouts`]: how many neighbours a sampled batch draws at each hop, checked once when
//! made, whichever front end made it.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// The neighbours to draw at each hop, from the seeds outwards: a positive count, or `-1`
/// for all of a node's neighbours. A count above a node's degree takes every neighbour.
/// [`Fanouts::rows`] draws none at every hop: the batches of a model that reads no graph
/// (SIGN's rows), which no user's fanouts give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fanouts(Vec<i64>);

impl Fanouts {
    /// `fanouts`, when there is at least one and each is a positive count or `-1`.
    pub fn new(fanouts: Vec<i64>) -> Result<Fanouts> {
        Fanouts::check(&fanouts)?;
        Ok(Fanouts(fanouts))
    }

    /// Fails unless `fanouts` has at least one entry and each is a positive count or `-1`.
    pub fn check(fanouts: &[i64]) -> Result<()> {
        if let Some(&bad) = fanouts.iter().find(|&&f| f < -1 || f == 0) {
            return Err(Error::argument(
                "fanouts",
                format!("{bad} is not a fanout: use a positive count, or -1 for all neighbours"),
            ));
        }
        Fanouts::check_counts(fanouts)
    }

    /// `hops` hops that draw no neighbour: each block holds its seeds alone.
    pub fn rows(hops: usize) -> Fanouts {
        Fanouts(vec![0; hops])
    }

    /// Fails unless `fanouts` has at least one entry and each is a count (0 for none, as
    /// [`Fanouts::rows`] makes) or `-1`: what a sampler takes.
    pub fn check_counts(fanouts: &[i64]) -> Result<()> {
        match fanouts.iter().find(|&&f| f < -1) {
            Some(&bad) => Err(Error::argument(
                "fanouts",
                format!("{bad} is not a fanout: use a count, or -1 for all neighbours"),
            )),
            None if fanouts.is_empty() => Err(Error::argument(
                "fanouts",
                "give one fanout per layer, e.g. 15,10",
            )),
            None => Ok(()),
        }
    }

    /// One fanout per hop.
    pub fn as_slice(&self) -> &[i64] {
        &self.0
    }

    /// The number of hops.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no hops (never, for a checked value).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::ops::Deref for Fanouts {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        &self.0
    }
}

impl fmt::Display for Fanouts {
    /// The comma-separated counts, as front ends take them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text: Vec<String> = self.0.iter().map(i64::to_string).collect();
        f.write_str(&text.join(","))
    }
}

impl FromStr for Fanouts {
    type Err = String;
    /// Comma-separated counts, such as `15,10` or `-1,-1`.
    fn from_str(text: &str) -> std::result::Result<Fanouts, String> {
        let fanouts = text
            .split(',')
            .map(|f| {
                f.trim().parse::<i64>().map_err(|_| {
                    format!("'{f}' is not a count: give counts separated by commas, e.g. 15,10")
                })
            })
            .collect::<std::result::Result<Vec<i64>, String>>()?;
        Fanouts::new(fanouts).map_err(|e| match e {
            Error::Argument { msg, .. } => msg,
            other => other.to_string(),
        })
    }
}
