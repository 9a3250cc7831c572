//! A small unpickler for flight-recorder dumps, straight to JSON values.
//!
//! Why not serde-pickle: version 1.2 fails with `Recursive` on any container that the
//! stream references twice when it holds memoized children (`{"a": s, "b": s}` with
//! `s = [[1]]`), and both Python's pickler and torch's share objects that way (torch
//! memoizes repeated IValues such as stack frames, and strings). Here the memo holds
//! indices into an arena, so a shared object is simply read twice.
//!
//! Covered: protocols 0 to 5 for None, bools, ints (any size), floats, str, bytes,
//! lists, tuples, dicts and sets, with the memo, MARK, POP and DUP. Objects (GLOBAL,
//! REDUCE, NEWOBJ, BUILD) become `null`, except torch's `torch.jit._pickle` helpers
//! (`build_intlist`, `restore_type_tag`, ...), which return their first argument.
//! Cycles become `null`.
//!
//! Bounded: a shared object is expanded once per reference, so a few hundred bytes
//! that reference the previous level twice, 40 levels deep, describe 2^40 values. The
//! decoder counts what it builds, while reading and while expanding, and stops with
//! [`PickleError::TooLarge`] as soon as a [`PickleLimits`] bound is passed.

use std::collections::HashMap;

use gpuvet_model::bounds::OBJECT_WEIGHT;
use serde_json::{Map, Number, Value};

/// Why a pickle could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PickleError {
    #[error("{reason} at byte {offset}")]
    Invalid { offset: usize, reason: String },
    /// Decoding would build more than a bound allows.
    #[error("it decodes to more than `{limit}` {what}")]
    TooLarge { what: &'static str, limit: usize },
}

/// How much one decode may build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PickleLimits {
    /// Values (containers, scalars and dictionary keys; a dictionary counts
    /// [`OBJECT_WEIGHT`]), counted as they are read and again as shared references are
    /// expanded.
    pub values: usize,
    /// Bytes of text (strings and dictionary keys) after expansion.
    pub text_bytes: usize,
}

/// Decode one pickle into a JSON value (see the module docs for the mapping).
pub fn pickle_to_json(data: &[u8], limits: PickleLimits) -> Result<Value, PickleError> {
    let mut unpickler = Unpickler {
        data,
        pos: 0,
        nodes: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        pushed: 0,
        limits,
    };
    let root = unpickler.run()?;
    let mut expand = Expand {
        nodes: &unpickler.nodes,
        visiting: vec![false; unpickler.nodes.len()],
        values: 0,
        text_bytes: 0,
        limits,
    };
    expand.value(root, 0)
}

/// The deepest nesting converted; deeper values become `null` (dumps nest 4 deep).
const MAX_DEPTH: usize = 128;

#[derive(Debug)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Big(i128),
    Float(f64),
    Str(String),
    List(Vec<usize>),
    Tuple(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    /// A global reference, by its module (the name does not matter here).
    Global(String),
    /// An object this reader does not build.
    Opaque,
}

struct Unpickler<'a> {
    data: &'a [u8],
    pos: usize,
    /// Every value read; the stack, the memo and containers refer to it by index.
    nodes: Vec<Node>,
    stack: Vec<usize>,
    /// Stack lengths at each MARK.
    marks: Vec<usize>,
    memo: HashMap<u64, usize>,
    /// Everything pushed so far, values and references: what the arena, the stack and
    /// the containers hold is at most this many indices and nodes.
    pushed: usize,
    limits: PickleLimits,
}

impl Unpickler<'_> {
    fn fail<T>(&self, reason: impl Into<String>) -> Result<T, PickleError> {
        Err(PickleError::Invalid {
            offset: self.pos,
            reason: reason.into(),
        })
    }

    /// Counts one more push; fails once the values bound is passed.
    fn count_push(&mut self) -> Result<(), PickleError> {
        self.pushed += 1;
        if self.pushed > self.limits.values {
            return Err(PickleError::TooLarge {
                what: "values",
                limit: self.limits.values,
            });
        }
        Ok(())
    }

    fn take(&mut self, count: usize) -> Result<&[u8], PickleError> {
        let end = self
            .pos
            .checked_add(count)
            .filter(|end| *end <= self.data.len());
        let Some(end) = end else {
            return self.fail(format!("truncated: {count} more bytes expected"));
        };
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn byte(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn uint(&mut self, width: usize) -> Result<u64, PickleError> {
        let bytes = self.take(width)?;
        Ok(bytes
            .iter()
            .rev()
            .fold(0u64, |value, byte| (value << 8) | u64::from(*byte)))
    }

    fn length(&mut self, width: usize) -> Result<usize, PickleError> {
        let length = self.uint(width)?;
        usize::try_from(length).or_else(|_| self.fail("length too large"))
    }

    fn line(&mut self) -> Result<String, PickleError> {
        let rest = &self.data[self.pos..];
        let Some(end) = rest.iter().position(|b| *b == b'\n') else {
            return self.fail("truncated: newline expected");
        };
        let line = String::from_utf8_lossy(&rest[..end]).into_owned();
        self.pos += end + 1;
        Ok(line)
    }

    fn push(&mut self, node: Node) -> Result<(), PickleError> {
        self.count_push()?;
        self.nodes.push(node);
        self.stack.push(self.nodes.len() - 1);
        Ok(())
    }

    /// Pushes another reference to a node already built (DUP, a memo get).
    fn push_ref(&mut self, index: usize) -> Result<(), PickleError> {
        self.count_push()?;
        self.stack.push(index);
        Ok(())
    }

    fn pop(&mut self) -> Result<usize, PickleError> {
        match self.stack.pop() {
            Some(index) => Ok(index),
            None => self.fail("stack underflow"),
        }
    }

    fn top(&self) -> Result<usize, PickleError> {
        match self.stack.last() {
            Some(index) => Ok(*index),
            None => self.fail("stack underflow"),
        }
    }

    fn pop_mark(&mut self) -> Result<Vec<usize>, PickleError> {
        let Some(mark) = self.marks.pop() else {
            return self.fail("mark expected");
        };
        if mark > self.stack.len() {
            return self.fail("mark beyond the stack");
        }
        Ok(self.stack.split_off(mark))
    }

    fn memo_get(&mut self, key: u64) -> Result<(), PickleError> {
        match self.memo.get(&key) {
            Some(index) => self.push_ref(*index),
            None => self.fail(format!("memo key {key} not found")),
        }
    }

    fn memo_put(&mut self, key: u64) -> Result<(), PickleError> {
        let top = self.top()?;
        self.memo.insert(key, top);
        Ok(())
    }

    fn extend_list(&mut self, target: usize, items: Vec<usize>) -> Result<(), PickleError> {
        match &mut self.nodes[target] {
            Node::List(list) => {
                list.extend(items);
                Ok(())
            }
            // Appending to an object we do not build: ignore, as its value is null.
            Node::Opaque => Ok(()),
            _ => self.fail("append to a non-list"),
        }
    }

    fn extend_dict(&mut self, target: usize, items: Vec<usize>) -> Result<(), PickleError> {
        if !items.len().is_multiple_of(2) {
            return self.fail("odd number of dictionary items");
        }
        let pairs = items.chunks(2).map(|pair| (pair[0], pair[1]));
        match &mut self.nodes[target] {
            Node::Dict(dict) => {
                dict.extend(pairs);
                Ok(())
            }
            Node::Opaque => Ok(()),
            _ => self.fail("set item on a non-dictionary"),
        }
    }

    fn int_from_le(&self, bytes: &[u8]) -> Result<Node, PickleError> {
        if bytes.is_empty() {
            return Ok(Node::Int(0));
        }
        if bytes.len() > 16 {
            return self.fail("integer wider than 128 bits");
        }
        let negative = bytes[bytes.len() - 1] & 0x80 != 0;
        let mut buffer = [if negative { 0xff } else { 0 }; 16];
        buffer[..bytes.len()].copy_from_slice(bytes);
        let value = i128::from_le_bytes(buffer);
        Ok(match i64::try_from(value) {
            Ok(small) => Node::Int(small),
            Err(_) => Node::Big(value),
        })
    }

    fn text_int(&self, line: &str) -> Result<Node, PickleError> {
        let digits = line.trim().trim_end_matches('L');
        match digits {
            // Protocol 0 writes bools as INT 01 / 00.
            "01" => Ok(Node::Bool(true)),
            "00" => Ok(Node::Bool(false)),
            _ => match digits.parse::<i128>() {
                Ok(value) => Ok(i64::try_from(value).map_or(Node::Big(value), Node::Int)),
                Err(_) => self.fail(format!("invalid integer `{digits}`")),
            },
        }
    }

    fn string(&mut self, width: usize) -> Result<Node, PickleError> {
        let length = self.length(width)?;
        let bytes = self.take(length)?;
        Ok(Node::Str(String::from_utf8_lossy(bytes).into_owned()))
    }

    /// Run until STOP; returns the root node.
    fn run(&mut self) -> Result<usize, PickleError> {
        loop {
            let opcode = self.byte()?;
            if opcode == b'.' {
                return self.pop(); // STOP
            }
            let known = self.framing_op(opcode)?
                || self.number_op(opcode)?
                || self.string_op(opcode)?
                || self.container_op(opcode)?
                || self.memo_op(opcode)?
                || self.object_op(opcode)?;
            if !known {
                return self.fail(format!("unsupported opcode 0x{opcode:02x}"));
            }
        }
    }

    /// Protocol framing, marks and stack shuffles. `Ok(false)`: not one of these opcodes.
    fn framing_op(&mut self, opcode: u8) -> Result<bool, PickleError> {
        match opcode {
            0x80 => {
                self.byte()?; // PROTO
            }
            0x95 => {
                self.take(8)?; // FRAME
            }
            b'(' => self.marks.push(self.stack.len()),
            b'0' => {
                self.pop()?;
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let top = self.top()?;
                self.push_ref(top)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Constants and numbers. `Ok(false)`: not one of these opcodes.
    fn number_op(&mut self, opcode: u8) -> Result<bool, PickleError> {
        match opcode {
            b'N' => self.push(Node::Null)?,
            0x88 => self.push(Node::Bool(true))?,
            0x89 => self.push(Node::Bool(false))?,
            b'J' => {
                let bytes = self.take(4)?;
                let value = i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                self.push(Node::Int(i64::from(value)))?;
            }
            b'K' => {
                let value = self.uint(1)?;
                self.push(Node::Int(value as i64))?;
            }
            b'M' => {
                let value = self.uint(2)?;
                self.push(Node::Int(value as i64))?;
            }
            0x8a | 0x8b => {
                let width = if opcode == 0x8a { 1 } else { 4 };
                let length = self.length(width)?;
                let bytes = self.take(length)?.to_vec();
                let node = self.int_from_le(&bytes)?;
                self.push(node)?;
            }
            b'I' | b'L' => {
                let line = self.line()?;
                let node = self.text_int(&line)?;
                self.push(node)?;
            }
            b'G' => {
                let bytes = self.take(8)?;
                let mut raw = [0u8; 8];
                raw.copy_from_slice(bytes);
                self.push(Node::Float(f64::from_be_bytes(raw)))?;
            }
            b'F' => {
                let line = self.line()?;
                let value = line.trim().parse().unwrap_or(f64::NAN);
                self.push(Node::Float(value))?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Strings and bytes (bytes are read as text, lossily). `Ok(false)`: not one of these opcodes.
    fn string_op(&mut self, opcode: u8) -> Result<bool, PickleError> {
        match opcode {
            0x8c | b'U' | b'C' => {
                let node = self.string(1)?;
                self.push(node)?;
            }
            b'X' | b'T' | b'B' => {
                let node = self.string(4)?;
                self.push(node)?;
            }
            0x8d | 0x8e | 0x96 => {
                let node = self.string(8)?;
                self.push(node)?;
            }
            b'V' => {
                let line = self.line()?;
                self.push(Node::Str(line))?;
            }
            b'S' => {
                let line = self.line()?;
                let quoted = line.trim();
                let unquoted = quoted
                    .strip_prefix(['\'', '"'])
                    .and_then(|s| s.strip_suffix(['\'', '"']))
                    .unwrap_or(quoted);
                self.push(Node::Str(unquoted.to_string()))?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Containers. `Ok(false)`: not one of these opcodes.
    fn container_op(&mut self, opcode: u8) -> Result<bool, PickleError> {
        match opcode {
            b']' | 0x8f => self.push(Node::List(Vec::new()))?,
            b')' => self.push(Node::Tuple(Vec::new()))?,
            b'}' => self.push(Node::Dict(Vec::new()))?,
            b'l' | 0x91 => {
                let items = self.pop_mark()?;
                self.push(Node::List(items))?;
            }
            b't' => {
                let items = self.pop_mark()?;
                self.push(Node::Tuple(items))?;
            }
            0x85..=0x87 => {
                let count = usize::from(opcode - 0x84);
                if self.stack.len() < count {
                    return self.fail("stack underflow");
                }
                let items = self.stack.split_off(self.stack.len() - count);
                self.push(Node::Tuple(items))?;
            }
            b'd' => {
                let items = self.pop_mark()?;
                self.push(Node::Dict(Vec::new()))?;
                let dict = self.top()?;
                self.extend_dict(dict, items)?;
            }
            b'a' => {
                let item = self.pop()?;
                let list = self.top()?;
                self.extend_list(list, vec![item])?;
            }
            b'e' | 0x90 => {
                let items = self.pop_mark()?;
                let list = self.top()?;
                self.extend_list(list, items)?;
            }
            b's' => {
                let value = self.pop()?;
                let key = self.pop()?;
                let dict = self.top()?;
                self.extend_dict(dict, vec![key, value])?;
            }
            b'u' => {
                let items = self.pop_mark()?;
                let dict = self.top()?;
                self.extend_dict(dict, items)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The memo. `Ok(false)`: not one of these opcodes.
    fn memo_op(&mut self, opcode: u8) -> Result<bool, PickleError> {
        match opcode {
            b'q' => {
                let key = self.uint(1)?;
                self.memo_put(key)?;
            }
            b'r' => {
                let key = self.uint(4)?;
                self.memo_put(key)?;
            }
            b'p' => {
                let line = self.line()?;
                let Ok(key) = line.trim().parse() else {
                    return self.fail(format!("invalid memo key `{line}`"));
                };
                self.memo_put(key)?;
            }
            0x94 => {
                let key = self.memo.len() as u64;
                self.memo_put(key)?;
            }
            b'h' => {
                let key = self.uint(1)?;
                self.memo_get(key)?;
            }
            b'j' => {
                let key = self.uint(4)?;
                self.memo_get(key)?;
            }
            b'g' => {
                let line = self.line()?;
                let Ok(key) = line.trim().parse() else {
                    return self.fail(format!("invalid memo key `{line}`"));
                };
                self.memo_get(key)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Objects: kept opaque, but torch's own list and type-tag helpers return their first
    /// argument. `Ok(false)`: not one of these opcodes.
    fn object_op(&mut self, opcode: u8) -> Result<bool, PickleError> {
        match opcode {
            b'c' => {
                let module = self.line()?;
                self.line()?; // the name
                self.push(Node::Global(module))?;
            }
            0x93 => {
                self.pop()?; // the name
                let module = self.pop()?;
                let module = match &self.nodes[module] {
                    Node::Str(text) => text.clone(),
                    _ => String::new(),
                };
                self.push(Node::Global(module))?;
            }
            b'R' => {
                let arguments = self.pop()?;
                let callable = self.pop()?;
                let passthrough = matches!(
                    &self.nodes[callable],
                    Node::Global(module) if module == "torch.jit._pickle"
                );
                match (&self.nodes[arguments], passthrough) {
                    (Node::Tuple(items), true) if !items.is_empty() => {
                        let first = items[0];
                        self.push_ref(first)?;
                    }
                    _ => self.push(Node::Opaque)?,
                }
            }
            0x81 => {
                self.pop()?;
                self.pop()?;
                self.push(Node::Opaque)?;
            }
            0x92 => {
                self.pop()?;
                self.pop()?;
                self.pop()?;
                self.push(Node::Opaque)?;
            }
            b'b' => {
                self.pop()?; // BUILD: the state; the object stays.
            }
            b'i' => {
                self.line()?;
                self.line()?;
                self.pop_mark()?;
                self.push(Node::Opaque)?;
            }
            b'o' => {
                self.pop_mark()?;
                self.push(Node::Opaque)?;
            }
            b'P' => {
                self.line()?;
                self.push(Node::Opaque)?;
            }
            b'Q' => {
                self.pop()?;
                self.push(Node::Opaque)?;
            }
            0x82 => {
                self.take(1)?;
                self.push(Node::Opaque)?;
            }
            0x83 => {
                self.take(2)?;
                self.push(Node::Opaque)?;
            }
            0x84 => {
                self.take(4)?;
                self.push(Node::Opaque)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The expansion of the arena into one JSON value, counting what it builds.
struct Expand<'a> {
    nodes: &'a [Node],
    /// Nodes on the path from the root: a node met again there is a cycle.
    visiting: Vec<bool>,
    values: usize,
    text_bytes: usize,
    limits: PickleLimits,
}

impl Expand<'_> {
    /// Counts a value of `weight` with `text` bytes of text; fails once a bound is
    /// passed.
    fn count(&mut self, weight: usize, text: usize) -> Result<(), PickleError> {
        self.values += weight;
        self.text_bytes = self.text_bytes.saturating_add(text);
        if self.values > self.limits.values {
            return Err(PickleError::TooLarge {
                what: "values",
                limit: self.limits.values,
            });
        }
        if self.text_bytes > self.limits.text_bytes {
            return Err(PickleError::TooLarge {
                what: "bytes of text",
                limit: self.limits.text_bytes,
            });
        }
        Ok(())
    }

    fn value(&mut self, index: usize, depth: usize) -> Result<Value, PickleError> {
        if self.visiting[index] || depth > MAX_DEPTH {
            self.count(1, 0)?;
            return Ok(Value::Null);
        }
        let nodes = self.nodes;
        let (weight, text) = match &nodes[index] {
            Node::Str(text) => (1, text.len()),
            // A dictionary costs a B-tree node, as it does in JSON.
            Node::Dict(_) => (OBJECT_WEIGHT, 0),
            _ => (1, 0),
        };
        self.count(weight, text)?;
        self.visiting[index] = true;
        let value = match &nodes[index] {
            Node::Null | Node::Global(_) | Node::Opaque => Value::Null,
            Node::Bool(flag) => Value::Bool(*flag),
            Node::Int(number) => Value::from(*number),
            Node::Big(number) => match u64::try_from(*number) {
                Ok(unsigned) => Value::from(unsigned),
                Err(_) => Value::String(number.to_string()),
            },
            Node::Float(number) => Number::from_f64(*number).map_or(Value::Null, Value::Number),
            Node::Str(text) => Value::String(text.clone()),
            Node::List(items) | Node::Tuple(items) => {
                let mut array = Vec::new();
                for item in items {
                    array.push(self.value(*item, depth + 1)?);
                }
                Value::Array(array)
            }
            Node::Dict(pairs) => {
                let mut map = Map::new();
                for (key, item) in pairs {
                    let key = match self.value(*key, depth + 1)? {
                        Value::String(text) => text,
                        other => {
                            let text = other.to_string();
                            self.count(0, text.len())?;
                            text
                        }
                    };
                    map.insert(key, self.value(*item, depth + 1)?);
                }
                Value::Object(map)
            }
        };
        self.visiting[index] = false;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: PickleLimits = PickleLimits {
        values: 10_000,
        text_bytes: 10_000,
    };

    /// `pickle.dumps({'a': s, 'b': s}, protocol=2)` with `s = [[1]]`: serde-pickle 1.2
    /// fails on this.
    const SHARED: &[u8] =
        b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02]q\x03K\x01aaX\x01\x00\x00\x00bq\x04h\x02u.";

    #[test]
    fn shared_objects_are_read_twice() {
        assert_eq!(
            pickle_to_json(SHARED, LIMITS).unwrap(),
            json!({"a": [[1]], "b": [[1]]})
        );
    }

    #[test]
    fn reads_what_serde_pickle_writes() {
        let value = json!({
            "version": "2.10",
            "n": -5,
            "big": 1_760_000_000_000_000_000_i64,
            "f": 0.25,
            "none": null,
            "flags": [true, false],
            "nested": {"k": [[1, 2], []]},
        });
        let bytes = serde_pickle::to_vec(&value, serde_pickle::SerOptions::new()).unwrap();
        assert_eq!(pickle_to_json(&bytes, LIMITS).unwrap(), value);
    }

    #[test]
    fn protocol_0_text_opcodes() {
        // pickle.dumps({'x': (1, 2.5, 'hi'), 'y': True}, protocol=0)
        let bytes = b"(dp0\nVx\np1\n(I1\nF2.5\nVhi\np2\ntp3\nsVy\np4\nI01\ns.";
        assert_eq!(
            pickle_to_json(bytes, LIMITS).unwrap(),
            json!({"x": [1, 2.5, "hi"], "y": true})
        );
    }

    #[test]
    fn large_and_negative_longs() {
        // LONG1 with 9 bytes: 2**64 + 1; LONG1 with 1 byte: -1.
        let bytes = b"\x80\x02]q\x00(\x8a\x09\x01\x00\x00\x00\x00\x00\x00\x00\x01\x8a\x01\xffe.";
        assert_eq!(
            pickle_to_json(bytes, LIMITS).unwrap(),
            json!(["18446744073709551617", -1])
        );
    }

    #[test]
    fn torch_list_helpers_pass_their_argument_through() {
        // GLOBAL torch.jit._pickle build_intlist, ([1, 2],), REDUCE
        let bytes =
            b"\x80\x02ctorch.jit._pickle\nbuild_intlist\nq\x00]q\x01(K\x01K\x02e\x85q\x02Rq\x03.";
        assert_eq!(pickle_to_json(bytes, LIMITS).unwrap(), json!([1, 2]));
        let other = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.";
        assert_eq!(pickle_to_json(other, LIMITS).unwrap(), Value::Null);
    }

    #[test]
    fn truncated_and_garbage_input_fail_with_an_offset() {
        let error = pickle_to_json(&SHARED[..20], LIMITS).unwrap_err();
        assert!(error.to_string().contains("at byte"), "{error}");
        let error = pickle_to_json(b"\x80\x02\xff", LIMITS).unwrap_err();
        assert_eq!(error.to_string(), "unsupported opcode 0xff at byte 3");
        assert!(pickle_to_json(b"", LIMITS).is_err());
    }

    /// `levels` lists, each holding the previous one twice through the memo: a few
    /// bytes a level, 2^levels leaves once expanded.
    pub(crate) fn memo_bomb(levels: u8) -> Vec<u8> {
        let mut bytes = b"\x80\x04K\x00\x94".to_vec(); // 0, MEMOIZE as 0
        for level in 1..=levels {
            // EMPTY_LIST, MARK, GET prev, GET prev, APPENDS, MEMOIZE as `level`
            let prev = level - 1;
            bytes.extend_from_slice(&[b']', b'(', b'h', prev, b'h', prev, b'e', 0x94]);
        }
        bytes.push(b'.');
        bytes
    }

    #[test]
    fn a_memo_bomb_is_refused_while_expanding() {
        let bomb = memo_bomb(40);
        assert!(bomb.len() < 400, "{}", bomb.len());
        let error = pickle_to_json(&bomb, LIMITS).unwrap_err();
        assert_eq!(error.to_string(), "it decodes to more than `10000` values");
    }

    #[test]
    fn the_value_bound_is_exact() {
        // 12 levels expand to 2^13 - 1 = 8191 values.
        let bomb = memo_bomb(12);
        let exact = PickleLimits {
            values: 8191,
            text_bytes: 0,
        };
        let value = pickle_to_json(&bomb, exact).unwrap();
        assert_eq!(value[0][0][0][0][0][0][0][0][0][0][0][0], json!(0));
        let under = PickleLimits {
            values: 8190,
            ..exact
        };
        assert!(matches!(
            pickle_to_json(&bomb, under),
            Err(PickleError::TooLarge {
                what: "values",
                limit: 8190
            })
        ));
    }

    #[test]
    fn the_text_bound_counts_every_expanded_copy() {
        // ['abcd', 'abcd' (memo), 'abcd' (memo)]: 12 bytes of text once expanded.
        let bytes = b"\x80\x02](X\x04\x00\x00\x00abcdq\x00h\x00h\x00e.";
        let fits = PickleLimits {
            values: 100,
            text_bytes: 12,
        };
        assert_eq!(
            pickle_to_json(bytes, fits).unwrap(),
            json!(["abcd", "abcd", "abcd"])
        );
        let over = PickleLimits {
            text_bytes: 11,
            ..fits
        };
        let error = pickle_to_json(bytes, over).unwrap_err();
        assert_eq!(
            error.to_string(),
            "it decodes to more than `11` bytes of text"
        );
    }

    #[test]
    fn a_dictionary_counts_as_a_b_tree_node() {
        // {'a': 1}: the dictionary, its key and its value.
        let bytes = b"\x80\x02}X\x01\x00\x00\x00aK\x01s.";
        let fits = PickleLimits {
            values: OBJECT_WEIGHT + 2,
            text_bytes: 1,
        };
        assert_eq!(pickle_to_json(bytes, fits).unwrap(), json!({"a": 1}));
        let over = PickleLimits {
            values: OBJECT_WEIGHT + 1,
            ..fits
        };
        assert!(pickle_to_json(bytes, over).is_err());
    }

    #[test]
    fn pushes_are_counted_while_reading() {
        // A stream of DUPs builds nothing new but grows the stack: refused while reading.
        let mut bytes = b"\x80\x02N".to_vec();
        bytes.extend(std::iter::repeat_n(b'2', 20_000));
        bytes.push(b'.');
        assert!(matches!(
            pickle_to_json(&bytes, LIMITS),
            Err(PickleError::TooLarge { what: "values", .. })
        ));
    }
}
