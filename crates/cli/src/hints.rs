//! Tips added to clap's errors for mistakes users of other tools make: a list option written
//! as separate words (`--fanouts 25 10`, as PyG's `num_neighbors=[25, 10]` reads), which clap
//! reports only as an unexpected argument.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The options whose value is one comma-separated list.
const LIST_OPTIONS: &[&str] = &["--fanouts", "--eval-fanouts", "--split-counts"];

/// Whether `word` could be an item of a list of integers (`10`, `-1`, `5,5`).
fn is_list_item(word: &str) -> bool {
    !word.is_empty()
        && word
            .split(',')
            .all(|w| w.strip_prefix('-').unwrap_or(w).parse::<u64>().is_ok())
}

/// The corrected spelling when `unexpected` is one more item of a list option written as
/// separate words in `args`: `--fanouts 25,10` for `--fanouts 25 10`.
pub(crate) fn list_tip(args: &[String], unexpected: &str) -> Option<String> {
    if !is_list_item(unexpected) {
        return None;
    }
    (0..args.len())
        .filter(|&i| args[i] == unexpected)
        .find_map(|i| tip_at(args, i))
}

/// The tip when the list item at `at` follows a list option and its first item.
fn tip_at(args: &[String], at: usize) -> Option<String> {
    // Walk back over the list's items to the word that starts it.
    let mut start = at;
    while start > 0 && is_list_item(&args[start - 1]) {
        start -= 1;
    }
    let before = args[..start].last()?;
    let (option, mut items) = match before.split_once('=') {
        // `--fanouts=25 10`
        Some((o, v)) if is_list_item(v) => (o, vec![v]),
        // `--fanouts 25 10`: the option's own value is the first item
        _ if start < at => (before.as_str(), Vec::new()),
        _ => return None,
    };
    if !LIST_OPTIONS.contains(&option) {
        return None;
    }
    items.extend(
        args[start..]
            .iter()
            .take_while(|a| is_list_item(a))
            .map(String::as_str),
    );
    Some(format!(
        "{option} takes one comma-separated list: {option} {}",
        items.join(",")
    ))
}

/// `err` with a tip when it comes from one of the mistakes above.
pub(crate) fn with_tips(mut err: clap::Error, args: &[OsString]) -> clap::Error {
    if err.kind() != ErrorKind::UnknownArgument {
        return err;
    }
    let Some(ContextValue::String(unexpected)) = err.get(ContextKind::InvalidArg) else {
        return err;
    };
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(tip) = list_tip(&args, &unexpected.clone()) {
        err.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![tip.into()]),
        );
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn a_list_written_as_words_gets_its_comma_spelling() {
        let args = words("graphloom train --fanouts 25 10 --epochs 3");
        assert_eq!(
            list_tip(&args, "10").as_deref(),
            Some("--fanouts takes one comma-separated list: --fanouts 25,10")
        );
        let args = words("graphloom train --eval-fanouts=-1 -1 5");
        assert_eq!(
            list_tip(&args, "-1").as_deref(),
            Some("--eval-fanouts takes one comma-separated list: --eval-fanouts -1,-1,5")
        );
    }

    #[test]
    fn other_unexpected_words_get_no_tip() {
        assert_eq!(list_tip(&words("graphloom train --epochs 3 4"), "4"), None);
        assert_eq!(
            list_tip(&words("graphloom train --fanouts 25 x"), "x"),
            None
        );
        let args = words("graphloom train --epochs 10 --fanouts 25 10");
        assert_eq!(
            list_tip(&args, "10").as_deref(),
            Some("--fanouts takes one comma-separated list: --fanouts 25,10")
        );
    }
}
