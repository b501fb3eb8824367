//! A reader for the subset of Python's pickle format that the Planetoid files use: protocol 2
//! (and the protocol 3/4 opcodes numpy and scipy objects use when re-pickled), building plain
//! values, numpy arrays and scipy CSR matrices. It executes nothing: globals are only names.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::features::{dense_size, offsets_ok};

/// A Python object built by REDUCE, NEWOBJ or BUILD, described by its class and arguments.
#[derive(Debug, Default)]
pub(crate) struct Object {
    pub(crate) class: Option<(Rc<str>, Rc<str>)>,
    pub(crate) args: Rc<[Value]>,
    pub(crate) state: Option<Value>,
    /// Items set on a dict subclass (`collections.defaultdict`).
    pub(crate) items: Vec<(Value, Value)>,
}

/// A pickled value. Values that hold data are shared, not copied, so fetching one from the
/// memo (two bytes of pickle) costs no memory however large it is.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float,
    Bytes(Rc<[u8]>),
    Tuple(Rc<[Value]>),
    List(Rc<RefCell<Vec<Value>>>),
    Dict(Rc<RefCell<Vec<(Value, Value)>>>),
    Global(Rc<str>, Rc<str>),
    Object(Rc<RefCell<Object>>),
    Mark,
}

impl Value {
    pub(crate) fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
    pub(crate) fn as_str(&self) -> Option<String> {
        match self {
            Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or("truncated pickle")?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn line(&mut self) -> Result<Rc<str>, String> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("truncated pickle")?;
        self.pos += end + 1;
        Ok(String::from_utf8_lossy(&rest[..end]).into())
    }
}

/// Unpickles `data` into a [`Value`].
pub(crate) fn load(data: &[u8]) -> Result<Value, String> {
    let mut r = Reader { data, pos: 0 };
    let mut stack: Vec<Value> = Vec::new();
    let mut memo: HashMap<u32, Value> = HashMap::new();
    let pop = |stack: &mut Vec<Value>| {
        stack
            .pop()
            .ok_or_else(|| "pickle stack underflow".to_string())
    };
    let pop_mark = |stack: &mut Vec<Value>| -> Result<Vec<Value>, String> {
        let at = stack
            .iter()
            .rposition(|v| matches!(v, Value::Mark))
            .ok_or("pickle MARK missing")?;
        let items = stack.split_off(at + 1);
        stack.pop();
        Ok(items)
    };
    loop {
        let op = r.u8()?;
        match op {
            0x80 => {
                r.u8()?; // PROTO
            }
            0x95 => {
                r.take(8)?; // FRAME
            }
            b'.' => return pop(&mut stack),
            b'(' => stack.push(Value::Mark),
            b'N' => stack.push(Value::None),
            0x88 => stack.push(Value::Bool(true)),
            0x89 => stack.push(Value::Bool(false)),
            b'K' => stack.push(Value::Int(r.u8()? as i64)),
            b'M' => stack.push(Value::Int(r.u16()? as i64)),
            b'J' => stack.push(Value::Int(r.u32()? as i32 as i64)),
            0x8a => {
                let n = r.u8()? as usize;
                let bytes = r.take(n)?;
                if n > 8 {
                    return Err("integer wider than 64 bits".into());
                }
                let mut v: i64 = 0;
                for (i, &b) in bytes.iter().enumerate() {
                    v |= (b as i64) << (8 * i);
                }
                if n > 0 && n < 8 && bytes[n - 1] & 0x80 != 0 {
                    v -= 1i64 << (8 * n);
                }
                stack.push(Value::Int(v));
            }
            b'G' => {
                r.take(8)?; // BINFLOAT: no Planetoid reader needs float scalars
                stack.push(Value::Float)
            }
            b'U' | 0x8c | b'C' => {
                let n = r.u8()? as usize;
                stack.push(Value::Bytes(r.take(n)?.into()));
            }
            b'T' | b'X' | b'B' => {
                let n = r.u32()? as usize;
                stack.push(Value::Bytes(r.take(n)?.into()));
            }
            b')' => stack.push(Value::Tuple(Rc::new([]))),
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                if stack.len() < n {
                    return Err("pickle stack underflow".into());
                }
                let items = stack.split_off(stack.len() - n);
                stack.push(Value::Tuple(items.into()));
            }
            b't' => {
                let items = pop_mark(&mut stack)?;
                stack.push(Value::Tuple(items.into()));
            }
            b']' => stack.push(Value::List(Rc::default())),
            b'}' => stack.push(Value::Dict(Rc::default())),
            b'a' => {
                let v = pop(&mut stack)?;
                append(stack.last(), vec![v])?;
            }
            b'e' => {
                let items = pop_mark(&mut stack)?;
                append(stack.last(), items)?;
            }
            b's' => {
                let v = pop(&mut stack)?;
                let k = pop(&mut stack)?;
                set_items(stack.last(), vec![k, v])?;
            }
            b'u' => {
                let items = pop_mark(&mut stack)?;
                set_items(stack.last(), items)?;
            }
            b'c' => {
                let module = r.line()?;
                let name = r.line()?;
                stack.push(Value::Global(module, name));
            }
            0x93 => {
                let name = pop(&mut stack)?.as_str().ok_or("STACK_GLOBAL name")?;
                let module = pop(&mut stack)?.as_str().ok_or("STACK_GLOBAL module")?;
                stack.push(Value::Global(module.into(), name.into()));
            }
            b'q' => {
                let k = r.u8()? as u32;
                memo.insert(k, stack.last().ok_or("BINPUT on empty stack")?.clone());
            }
            b'r' => {
                let k = r.u32()?;
                memo.insert(k, stack.last().ok_or("LONG_BINPUT on empty stack")?.clone());
            }
            0x94 => {
                let k = memo.len() as u32;
                memo.insert(k, stack.last().ok_or("MEMOIZE on empty stack")?.clone());
            }
            b'h' | b'j' => {
                let k = if op == b'h' { r.u8()? as u32 } else { r.u32()? };
                stack.push(
                    memo.get(&k)
                        .ok_or_else(|| format!("memo key {k} missing"))?
                        .clone(),
                );
            }
            b'R' | 0x81 => {
                let args = pop(&mut stack)?;
                let callable = pop(&mut stack)?;
                let class = match callable {
                    Value::Global(m, n) => Some((m, n)),
                    _ => None,
                };
                let args = match args {
                    Value::Tuple(a) => a,
                    other => Rc::new([other]),
                };
                let obj = Object {
                    class,
                    args,
                    ..Object::default()
                };
                stack.push(Value::Object(Rc::new(RefCell::new(obj))));
            }
            b'b' => {
                let state = pop(&mut stack)?;
                match stack.last() {
                    Some(Value::Object(o)) => o.borrow_mut().state = Some(state),
                    _ => return Err("BUILD on a value that is not an object".into()),
                }
            }
            other => {
                return Err(format!(
                    "unsupported pickle opcode 0x{other:02x} at byte {}",
                    r.pos - 1
                ))
            }
        }
    }
}

fn append(target: Option<&Value>, items: Vec<Value>) -> Result<(), String> {
    match target {
        Some(Value::List(l)) => {
            l.borrow_mut().extend(items);
            Ok(())
        }
        _ => Err("APPEND on a value that is not a list".into()),
    }
}

fn set_items(target: Option<&Value>, items: Vec<Value>) -> Result<(), String> {
    let mut pairs = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        pairs.push((k, v));
    }
    match target {
        Some(Value::Dict(d)) => d.borrow_mut().extend(pairs),
        Some(Value::Object(o)) => o.borrow_mut().items.extend(pairs),
        _ => return Err("SETITEMS on a value that is not a dict".into()),
    }
    Ok(())
}

/// A numpy array decoded from a pickle, with elements widened to f64.
#[derive(Debug)]
pub(crate) struct Array {
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<f64>,
}

fn decode_dtype(v: &Value) -> Result<(char, usize, bool), String> {
    let Value::Object(o) = v else {
        return Err("numpy dtype expected".into());
    };
    let o = o.borrow();
    let descr = o
        .args
        .first()
        .and_then(Value::as_str)
        .ok_or("dtype without a name")?;
    let big_endian = matches!(&o.state, Some(Value::Tuple(s)) if s.get(1).and_then(Value::as_str).as_deref() == Some(">"));
    let mut chars = descr.chars();
    let kind = chars.next().ok_or("empty dtype")?;
    let size: usize = chars
        .as_str()
        .parse()
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| format!("unsupported dtype {descr:?}"))?;
    Ok((kind, size, big_endian))
}

/// Decodes a numpy array pickled by `numpy.core.multiarray._reconstruct`.
pub(crate) fn to_array(v: &Value) -> Result<Array, String> {
    let Value::Object(o) = v else {
        return Err("numpy array expected".into());
    };
    let o = o.borrow();
    let Some(Value::Tuple(state)) = &o.state else {
        return Err("numpy array without state".into());
    };
    // State is (version, shape, dtype, is_fortran, raw) or, for old pickles, without version.
    let s: &[Value] = if state.len() == 5 { &state[1..] } else { state };
    let [Value::Tuple(shape), dtype, fortran, raw] = s else {
        return Err("unexpected numpy array state".into());
    };
    let shape: Vec<usize> = shape
        .iter()
        .map(|d| {
            d.as_int()
                .and_then(|d| usize::try_from(d).ok())
                .ok_or("bad shape")
        })
        .collect::<Result<_, _>>()?;
    if fortran.as_int() == Some(1) && shape.len() > 1 {
        return Err("Fortran-order arrays are not supported".into());
    }
    let (kind, size, be) = decode_dtype(dtype)?;
    let Value::Bytes(raw) = raw else {
        return Err("numpy object arrays are not supported".into());
    };
    let bytes = shape.iter().try_fold(size, |a, &d| a.checked_mul(d));
    if bytes != Some(raw.len()) {
        return Err(format!(
            "array of shape {shape:?} of {size}-byte {kind:?} elements does not fit its {} bytes",
            raw.len()
        ));
    }
    let data = raw
        .chunks_exact(size)
        .map(|c| {
            let mut b = c.to_vec();
            if be {
                b.reverse();
            }
            Ok(match (kind, size) {
                ('f', 4) => f32::from_le_bytes(b[..].try_into().unwrap()) as f64,
                ('f', 8) => f64::from_le_bytes(b[..].try_into().unwrap()),
                ('i', 4) => i32::from_le_bytes(b[..].try_into().unwrap()) as f64,
                ('i', 8) => i64::from_le_bytes(b[..].try_into().unwrap()) as f64,
                ('u', 1) | ('b', 1) => b[0] as f64,
                ('i', 1) => b[0] as i8 as f64,
                _ => return Err(format!("unsupported dtype {kind:?} of {size} bytes")),
            })
        })
        .collect::<Result<Vec<f64>, String>>()?;
    Ok(Array { shape, data })
}

/// Decodes a scipy sparse CSR matrix into a dense row-major `[rows, cols]` f64 array, or a
/// numpy array as it is.
pub(crate) fn to_dense(v: &Value) -> Result<Array, String> {
    let Value::Object(o) = v else {
        return Err("matrix expected".into());
    };
    let is_csr = o
        .borrow()
        .class
        .as_ref()
        .is_some_and(|(m, n)| m.starts_with("scipy.sparse") && &**n == "csr_matrix");
    if !is_csr {
        return to_array(v);
    }
    let o = o.borrow();
    let Some(Value::Dict(state)) = &o.state else {
        return Err("csr_matrix without state".into());
    };
    let state = state.borrow();
    let get = |key: &str| {
        state
            .iter()
            .find(|(k, _)| k.as_str().as_deref() == Some(key))
            .map(|(_, v)| v)
    };
    let Some(Value::Tuple(shape)) = get("_shape") else {
        return Err("csr_matrix without _shape".into());
    };
    let dim = |i: usize| {
        shape
            .get(i)
            .and_then(Value::as_int)
            .and_then(|d| usize::try_from(d).ok())
            .ok_or("bad _shape")
    };
    let (rows, cols) = (dim(0)?, dim(1)?);
    let indptr = to_array(get("indptr").ok_or("csr_matrix without indptr")?)?.data;
    let indices = to_array(get("indices").ok_or("csr_matrix without indices")?)?.data;
    let values = to_array(get("data").ok_or("csr_matrix without data")?)?.data;
    // Offsets from 0, never decreasing, ending at the number of values: then every stored
    // value has its place. The values are indices, so they must be whole numbers.
    if indices.len() != values.len() || !offsets_ok(&indptr, rows, values.len()) {
        return Err("inconsistent csr_matrix arrays (indptr, indices, data)".into());
    }
    let mut dense = vec![0.0; dense_size(rows, cols, values.len())?];
    for r in 0..rows {
        for e in indptr[r] as usize..indptr[r + 1] as usize {
            let c = indices[e];
            if !(c >= 0.0 && c < cols as f64) {
                return Err(format!("csr_matrix column {c} out of range 0..{cols}"));
            }
            dense[r * cols + c as usize] += values[e];
        }
    }
    Ok(Array {
        shape: vec![rows, cols],
        data: dense,
    })
}

/// Decodes a (default)dict of int -> list of ints into adjacency pairs `(key, item)`; more
/// than `max` pairs are refused (a pickle of `max` bytes holds fewer unless it shares lists
/// between keys, which a graph's adjacency never does).
pub(crate) fn to_adjacency(v: &Value, max: usize) -> Result<Vec<(i64, i64)>, String> {
    let items: Vec<(Value, Value)> = match v {
        Value::Dict(d) => d.borrow().clone(),
        Value::Object(o) => o.borrow().items.clone(),
        _ => return Err("dict of adjacency lists expected".into()),
    };
    let mut pairs = Vec::new();
    for (k, list) in items {
        let k = k.as_int().ok_or("non-integer node key")?;
        let Value::List(l) = list else {
            return Err("adjacency value is not a list".into());
        };
        for n in l.borrow().iter() {
            if pairs.len() == max {
                return Err(format!("more than {max} adjacency entries in {max} bytes"));
            }
            pairs.push((k, n.as_int().ok_or("non-integer neighbour")?));
        }
    }
    Ok(pairs)
}
