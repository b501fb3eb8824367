//! Damaged copies of a reader's valid input files, and one run of the reader on them.
//!
//! A [`Target`] is a reader with the files of a valid input. A [`Case`] is those files with one
//! of them damaged by one to three mutations (bit flips, truncation, inserted, deleted or
//! duplicated bytes, and edits of the fields a header holds: numbers in text replaced by huge,
//! negative or non-finite ones, dtype names swapped, binary integers and floats overwritten).
//! Every choice comes from a [`Choices`]: a seeded generator in the workspace's tests (each
//! case is replayed from its seed), or the bytes libFuzzer hands a `cargo fuzz` target (which
//! then explores the mutations of valid files instead of raw bytes).
//!
//! This file is shared: `#[path]`-included by the fuzz tests of the io, graph and nn crates and
//! by the targets under `fuzz/fuzz_targets`, so both run the very same cases.

use std::path::Path;

/// Where the choices of a case come from.
pub(crate) enum Choices<'a> {
    /// splitmix64 from a seed: the workspace's tests.
    Seeded(u64),
    /// The bytes of a fuzzer's input, 8 at a time, then zeros.
    Bytes(&'a [u8]),
}

impl Choices<'_> {
    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        match self {
            Choices::Seeded(state) => {
                *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = *state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            }
            Choices::Bytes(rest) => {
                let take = rest.len().min(8);
                let mut word = [0u8; 8];
                word[..take].copy_from_slice(&rest[..take]);
                *rest = &rest[take..];
                u64::from_le_bytes(word)
            }
        }
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// One of `items`.
    fn pick<'b, T>(&mut self, items: &'b [T]) -> &'b T {
        &items[self.below(items.len())]
    }
}

/// Numbers that break readers, written in place of a number of a text field.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "-0",
    "1.5",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "100000000000",
    "1e11",
    "1e308",
    "1e400",
    "-1e400",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "Infinity",
    "",
];

/// Names a header holds (dtypes, flags, kinds) swapped for one another.
const WORDS: &[&str] = &[
    "<f4", "<f8", "<f2", "<u2", "<i4", "<i8", "|u1", "|b1", "|i1", ">f4", ">i8", "<c8", "O", "V8",
    "True", "False", "true", "false", "null", "f32", "f64", "bf16", "i64", "gcn", "sage", "gat",
    "relu", "F32", "F64", "I64", "BF16", "U8", "f8", "i4", "i8",
];

/// Little-endian integers and floats written over binary fields.
const WORDS64: &[u64] = &[
    0,
    1,
    u64::MAX,
    i32::MAX as u64,
    1 << 31,
    u32::MAX as u64,
    1 << 32,
    1 << 40,
    i64::MAX as u64,
    1 << 63,
    0x7ff8_0000_0000_0000, // f64 NaN
    0x7ff0_0000_0000_0000, // f64 infinity
    0x7fc0_0000_7fc0_0000, // two f32 NaNs
    0x7f80_0000_7f80_0000, // two f32 infinities
];

/// Files by path in an input folder, with their contents.
pub(crate) type Files = Vec<(String, Vec<u8>)>;

/// A reader with the files of a valid input.
pub(crate) struct Target {
    /// The reader's name, in messages.
    pub(crate) name: &'static str,
    /// The files of a valid input: path in the input folder and contents, before `encode`.
    pub(crate) files: Files,
    /// Turns the files into those written to disk (compressing, archiving), or keeps them.
    pub(crate) encode: fn(Files) -> Files,
    /// Reads the input folder as the reader does; returns the errors it gave (none when it
    /// accepted the input). It must never panic.
    pub(crate) read: fn(&Path) -> Vec<String>,
    /// Bytes the reader may allocate per byte of input (the fuzz tests' bound, besides a
    /// fixed allowance for buffers).
    pub(crate) alloc_factor: usize,
}

/// Files kept as they are.
pub(crate) fn plain(files: Files) -> Files {
    files
}

/// The files of one case and how they were damaged.
pub(crate) struct Case {
    /// The files to write, after `encode`.
    pub(crate) files: Files,
    /// What was done, to report a failure.
    pub(crate) what: String,
}

impl Case {
    /// A damaged copy of `target`'s files: its unencoded form damaged three times in four,
    /// else its encoded (compressed, archived) form.
    pub(crate) fn new(target: &Target, choices: &mut Choices<'_>) -> Case {
        let encoded_side = choices.below(4) == 0;
        let mut files = target.files.clone();
        if encoded_side {
            files = (target.encode)(files);
        }
        let k = choices.below(files.len());
        let mut what = format!("{}: {}:", target.name, files[k].0);
        let count = 1 + choices.below(3);
        for _ in 0..count {
            what.push(' ');
            what.push_str(&mutate(&mut files[k].1, choices));
            what.push(';');
        }
        if !encoded_side {
            files = (target.encode)(files);
        }
        Case { files, what }
    }

    /// Writes the files into `dir`, emptied first.
    pub(crate) fn write(&self, dir: &Path) {
        let _ = std::fs::remove_dir_all(dir);
        for (name, bytes) in &self.files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().expect("a file in the folder"))
                .expect("create the input folder");
            std::fs::write(&path, bytes).expect("write an input file");
        }
        std::fs::create_dir_all(dir).expect("create the input folder");
    }

    /// The bytes written.
    pub(crate) fn bytes(&self) -> usize {
        self.files.iter().map(|(_, b)| b.len()).sum()
    }
}

/// Where cases are written: memory (`/dev/shm`) where there is one, since a reader's output is
/// synced to disk file by file, else the temporary folder.
pub(crate) fn scratch_root() -> std::path::PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The files of a case's folder `dir`, sorted, for a reader that reads each of them.
// The graph crate's targets read whole dataset folders instead.
#[allow(dead_code)]
pub(crate) fn case_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .expect("the input folder")
        .map(|e| e.expect("an entry").path())
        .collect();
    paths.sort();
    paths
}

/// Checks that each error is one line naming a file of the input folder `dir`.
pub(crate) fn check_errors(errors: &[String], dir: &Path) -> Result<(), String> {
    let dir = dir.to_string_lossy();
    for e in errors {
        if e.trim().contains('\n') || !e.contains(dir.as_ref()) {
            return Err(format!("the error is not one line naming the file: {e}"));
        }
    }
    Ok(())
}

/// Runs one case of `target` in `dir` (removed after it) with the choices of a fuzzer's input:
/// panics when the reader does, or when an error is not one line naming its file.
pub(crate) fn run_input(target: &Target, dir: &Path, input: &[u8]) {
    let case = Case::new(target, &mut Choices::Bytes(input));
    case.write(dir);
    let checked = check_errors(&(target.read)(dir), dir);
    let _ = std::fs::remove_dir_all(dir);
    if let Err(e) = checked {
        panic!("{}: {e}", case.what);
    }
}

/// Applies one mutation to `data`; says what it did.
fn mutate(data: &mut Vec<u8>, choices: &mut Choices<'_>) -> String {
    let len = data.len();
    match choices.below(10) {
        0 if len > 0 => {
            let (at, bit) = (choices.below(len), choices.below(8));
            data[at] ^= 1 << bit;
            format!("flip bit {bit} of byte {at}")
        }
        1 => {
            let to = choices.below(len + 1);
            data.truncate(to);
            format!("truncate to {to} bytes")
        }
        2 => {
            let at = choices.below(len + 1);
            let n = 1 + choices.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| choices.next() as u8).collect();
            data.splice(at..at, bytes.iter().copied());
            format!("insert {bytes:?} at byte {at}")
        }
        3 if len > 0 => {
            let at = choices.below(len);
            let n = (1 + choices.below(16)).min(len - at);
            data.drain(at..at + n);
            format!("delete {n} bytes at byte {at}")
        }
        4 if len > 0 => {
            let from = choices.below(len);
            let n = (1 + choices.below(64)).min(len - from);
            let at = choices.below(len + 1);
            let chunk = data[from..from + n].to_vec();
            data.splice(at..at, chunk);
            format!("copy {n} bytes from byte {from} to byte {at}")
        }
        5 if len > 0 => {
            let at = choices.below(len);
            let v = *choices.pick(&[0u8, 1, 0x7f, 0x80, 0xff, b'0', b'9', b'-', b'\n', b',']);
            data[at] = v;
            format!("set byte {at} to {v:#04x}")
        }
        6 if len >= 8 => {
            let width = *choices.pick(&[4usize, 8]);
            let at = choices.below((len - width) / width + 1) * width;
            let v = *choices.pick(WORDS64);
            data[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
            format!("write {v:#x} as {width} bytes at byte {at}")
        }
        7 => replace_token(data, choices, number_spans(data), NUMBERS, "number"),
        8 => replace_token(data, choices, word_spans(data), WORDS, "name"),
        _ => {
            // A number edit is the most telling one for the headers and text formats here.
            replace_token(data, choices, number_spans(data), NUMBERS, "number")
        }
    }
}

/// Replaces one of `spans` of `data` by one of `with`.
fn replace_token(
    data: &mut Vec<u8>,
    choices: &mut Choices<'_>,
    spans: Vec<(usize, usize)>,
    with: &[&str],
    kind: &str,
) -> String {
    if spans.is_empty() {
        return format!("no {kind} to replace");
    }
    let (start, end) = *choices.pick(&spans);
    let new = *choices.pick(with);
    let old = String::from_utf8_lossy(&data[start..end]).into_owned();
    data.splice(start..end, new.bytes());
    format!("replace {kind} {old:?} at byte {start} by {new:?}")
}

/// Runs of digits (with a sign, a point and an exponent) in `data`.
fn number_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < data.len() {
        if data[i].is_ascii_digit() {
            let start = if i > 0 && data[i - 1] == b'-' {
                i - 1
            } else {
                i
            };
            let mut end = i;
            while end < data.len() && (data[end].is_ascii_digit() || b".eE+-".contains(&data[end]))
            {
                end += 1;
            }
            spans.push((start, end));
            i = end;
        } else {
            i += 1;
        }
    }
    spans
}

/// Occurrences of the names of [`WORDS`] in `data`.
fn word_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    for w in WORDS {
        let w = w.as_bytes();
        if w.len() < 2 {
            continue;
        }
        spans.extend(
            data.windows(w.len())
                .enumerate()
                .filter(|(_, s)| *s == w)
                .map(|(i, _)| (i, i + w.len())),
        );
    }
    spans.sort_unstable();
    spans
}
