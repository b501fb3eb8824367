//! "Did you mean": the name of a [`Choice`] closest to a value that names none, for the errors
//! of front ends (`--model graphsage` suggests `sage`, `--model GCN` suggests `gcn`).

use crate::Choice;

/// The edits (insertions, deletions, substitutions) between `a` and `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The name among `names` that `given` most likely meant: the same name in another case, a
/// name that the value contains or that contains it (`graphsage`, `GATConv`), else the name
/// within two edits (`sgae`); `None` when nothing is that close.
pub fn suggest<'a>(given: &str, names: &[&'a str]) -> Option<&'a str> {
    let lower = given.trim().to_lowercase();
    if lower.is_empty() {
        return None;
    }
    let exact = names.iter().find(|n| n.to_lowercase() == lower);
    let within = || {
        names.iter().find(|n| {
            let n = n.to_lowercase();
            lower.contains(&n) || n.contains(&lower)
        })
    };
    let near = || {
        names
            .iter()
            .map(|n| (edit_distance(&lower, &n.to_lowercase()), n))
            .filter(|&(d, _)| d <= 2)
            .min_by_key(|&(d, _)| d)
            .map(|(_, n)| n)
    };
    exact.or_else(within).or_else(near).copied()
}

/// [`suggest`] over the names of a [`Choice`].
pub fn suggest_choice<T: Choice>(given: &str) -> Option<&'static str> {
    let names: Vec<&'static str> = T::ALL.iter().map(|v| v.name()).collect();
    suggest(given, &names)
}

/// A command-line parser of a [`Choice`]: its names are the possible values (listed by `--help`
/// and by the error for any other value, with the closest name as a tip).
#[cfg(feature = "cli")]
#[derive(Clone)]
pub struct ChoiceParser<T>(std::marker::PhantomData<T>);

#[cfg(feature = "cli")]
impl<T> ChoiceParser<T> {
    /// The parser of `T`'s names.
    pub fn new() -> ChoiceParser<T> {
        ChoiceParser(std::marker::PhantomData)
    }
}

#[cfg(feature = "cli")]
impl<T> Default for ChoiceParser<T> {
    fn default() -> ChoiceParser<T> {
        ChoiceParser::new()
    }
}

#[cfg(feature = "cli")]
impl<T: Choice + Clone> clap::builder::TypedValueParser for ChoiceParser<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        use clap::error::{ContextKind, ContextValue, ErrorKind};
        let given = value.to_string_lossy();
        if let Some(v) = T::from_name(&given) {
            return Ok(v);
        }
        let mut err = clap::Error::new(ErrorKind::InvalidValue).with_cmd(cmd);
        let arg = arg.map_or_else(|| "...".to_string(), |a| a.to_string());
        err.insert(ContextKind::InvalidArg, ContextValue::String(arg));
        err.insert(
            ContextKind::InvalidValue,
            ContextValue::String(given.to_string()),
        );
        let names = T::ALL.iter().map(|v| v.name().to_string()).collect();
        err.insert(ContextKind::ValidValue, ContextValue::Strings(names));
        if let Some(name) = suggest_choice::<T>(&given) {
            err.insert(
                ContextKind::SuggestedValue,
                ContextValue::String(name.into()),
            );
        }
        Err(err)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            T::ALL
                .iter()
                .map(|v| clap::builder::PossibleValue::new(v.name())),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODELS: &[&str] = &["gcn", "sage", "gat"];

    #[test]
    fn names_in_other_cases_and_spellings_are_suggested() {
        assert_eq!(suggest("GCN", MODELS), Some("gcn"));
        assert_eq!(suggest("graphsage", MODELS), Some("sage"));
        assert_eq!(suggest("GraphSAGE", MODELS), Some("sage"));
        assert_eq!(suggest("GATConv", MODELS), Some("gat"));
        assert_eq!(suggest("sgae", MODELS), Some("sage"));
        assert_eq!(suggest("transformer", MODELS), None);
        assert_eq!(suggest("", MODELS), None);
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("sage", "sage"), 0);
        assert_eq!(edit_distance("sgae", "sage"), 2);
        assert_eq!(edit_distance("", "gat"), 3);
        assert_eq!(edit_distance("gcn", "gin"), 1);
    }
}
