//! A restricted pickle interpreter that never calls anything.
//!
//! It understands the opcodes of protocols 2 to 5 that `torch.save` emits
//! and builds plain values. Globals must be on the allow-list
//! ([`Global::resolve`]); calling one (`REDUCE`, `NEWOBJ`) only records a
//! [`Object::Call`]. The checkpoint layer decides what such records mean.
//!
//! Containers live in an arena ([`Pickle::objects`]) and values refer to them
//! by [`ObjId`], so the memo holds references, not copies: an object stored
//! once and fetched twice is one object, exponential memo graphs cost
//! nothing to build, and dropping the arena is not recursive. Limits on the
//! input size, object count, nesting depth, stack, memo and string lengths
//! turn hostile pickles into errors in bounded time and memory.

use std::collections::HashMap;

use crate::globals::Global;

/// Index of an object in [`Pickle::objects`].
pub type ObjId = u32;

/// A pickle value: a scalar, or a reference to an object in the arena.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// A float.
    Float(f64),
    /// An object in the arena.
    Ref(ObjId),
}

/// An object built by the pickle.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// A text string.
    Str(String),
    /// A byte string.
    Bytes(Vec<u8>),
    /// An integer too large for 64 bits: little-endian two's complement.
    BigInt(Vec<u8>),
    /// A tuple.
    Tuple(Vec<Value>),
    /// A list.
    List(Vec<Value>),
    /// A dict (or an `OrderedDict`) in insertion order. Keys are not
    /// de-duplicated here; whoever names its entries refuses repeats.
    Dict(Vec<(Value, Value)>),
    /// A set or frozenset.
    Set(Vec<Value>),
    /// An allow-listed global itself (a function, class or dtype object).
    Global(Global),
    /// `REDUCE` or `NEWOBJ` of an allow-listed global: a record of the call,
    /// never performed. `state` is set by a later `BUILD`.
    Call {
        /// What would have been called.
        func: Global,
        /// The arguments.
        args: Vec<Value>,
        /// The state a `BUILD` gave the result, if any.
        state: Option<Value>,
    },
    /// A persistent id (`BINPERSID`): in checkpoints, a storage reference.
    PersistentId(Value),
}

/// Limits that stop hostile pickles.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest pickle accepted, in bytes.
    pub max_input: usize,
    /// Most objects in the arena.
    pub max_objects: usize,
    /// Deepest nesting of containers.
    pub max_depth: u32,
    /// Most values on the stack.
    pub max_stack: usize,
    /// Most memo entries.
    pub max_memo: usize,
    /// Longest string, byte string or integer, in bytes.
    pub max_string: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_input: 1 << 30,
            max_objects: 20_000_000,
            max_depth: 1000,
            max_stack: 10_000_000,
            max_memo: 20_000_000,
            max_string: 64 << 20,
        }
    }
}

/// Why a pickle was refused, and at which byte.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("pickle byte {offset}: {kind}")]
pub struct PickleError {
    /// Byte offset in the pickle of the opcode at fault.
    pub offset: usize,
    /// What is wrong.
    pub kind: PickleErrorKind,
}

/// What is wrong with a pickle.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PickleErrorKind {
    /// A global that is not on the allow-list; it is never imported or called.
    #[error("global {module}.{name} is not allowed{}", hint.map(|h| format!(": {h}")).unwrap_or_default())]
    ForbiddenGlobal {
        /// The module.
        module: String,
        /// The name.
        name: String,
        /// Why, for well-known refused torch features.
        hint: Option<&'static str>,
    },
    /// An opcode this interpreter does not know.
    #[error("unknown or unsupported opcode 0x{0:02x}")]
    UnknownOpcode(u8),
    /// The pickle ends inside an opcode's argument.
    #[error("{opcode} needs {needed} more bytes but only {left} are left (truncated before STOP)")]
    Truncated {
        /// The opcode.
        opcode: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left.
        left: usize,
    },
    /// The pickle ends without `STOP`.
    #[error("the pickle ends without STOP")]
    NoStop,
    /// An opcode pops more values than the stack holds.
    #[error("{0} on an empty stack")]
    StackUnderflow(&'static str),
    /// An opcode needs a MARK that is not there.
    #[error("{0} without a MARK")]
    NoMark(&'static str),
    /// A memo id fetched before it was stored.
    #[error("memo id {0} was never stored")]
    MissingMemo(u64),
    /// A value of the wrong kind for an opcode.
    #[error("{opcode}: expected {expected}, found {found}")]
    WrongType {
        /// The opcode.
        opcode: &'static str,
        /// What it needs.
        expected: &'static str,
        /// What it got.
        found: String,
    },
    /// Invalid text.
    #[error("{0}: not valid UTF-8")]
    Utf8(&'static str),
    /// A limit was exceeded.
    #[error("{what} exceeds the limit of {limit}")]
    Limit {
        /// Which limit.
        what: &'static str,
        /// Its value.
        limit: u64,
    },
    /// `STOP` with a stack that does not hold exactly one value.
    #[error("STOP with {0} values on the stack (expected 1)")]
    BadStop(usize),
}

/// A parsed pickle: the arena and the root value.
#[derive(Debug, Clone)]
pub struct Pickle {
    objects: Vec<Object>,
    root: Value,
}

impl Pickle {
    /// Runs the pickle at the start of `data`. Returns it and the number of
    /// bytes it occupied (pickles can be concatenated, as in legacy files).
    pub fn parse(data: &[u8], limits: &Limits) -> Result<(Pickle, usize), PickleError> {
        if data.len() > limits.max_input {
            // A pickle may be shorter than its input (legacy files); only
            // its own bytes count, so limit the read window instead.
            return Machine::new(&data[..limits.max_input], limits).run();
        }
        Machine::new(data, limits).run()
    }

    /// The value the pickle produced.
    pub fn root(&self) -> Value {
        self.root
    }

    /// The object with this id. Ids come from this pickle's values.
    pub fn get(&self, id: ObjId) -> Option<&Object> {
        self.objects.get(id as usize)
    }

    /// Every object, by id.
    pub fn objects(&self) -> &[Object] {
        &self.objects
    }

    /// The object a value refers to, if it is a reference.
    pub fn deref(&self, v: Value) -> Option<&Object> {
        match v {
            Value::Ref(id) => self.get(id),
            _ => None,
        }
    }

    /// The string a value refers to, if it is one.
    pub fn as_str(&self, v: Value) -> Option<&str> {
        match self.deref(v) {
            Some(Object::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The items of a tuple (or list) value.
    pub fn as_seq(&self, v: Value) -> Option<&[Value]> {
        match self.deref(v) {
            Some(Object::Tuple(items) | Object::List(items)) => Some(items),
            _ => None,
        }
    }

    /// A short description of a value's kind, for error messages.
    pub fn kind(&self, v: Value) -> String {
        kind_of(&self.objects, v)
    }
}

/// One stack slot, with the nesting depth of what it holds.
#[derive(Clone, Copy)]
struct Slot {
    value: Value,
    depth: u32,
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    /// Where the current opcode began, for errors.
    at: usize,
    limits: &'a Limits,
    objects: Vec<Object>,
    /// Nesting depth of each object, parallel to `objects`.
    depths: Vec<u32>,
    stack: Vec<Slot>,
    marks: Vec<usize>,
    memo: HashMap<u64, Slot>,
}

type R<T> = Result<T, PickleError>;

impl<'a> Machine<'a> {
    fn new(data: &'a [u8], limits: &'a Limits) -> Machine<'a> {
        Machine {
            data,
            pos: 0,
            at: 0,
            limits,
            objects: Vec::new(),
            depths: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
        }
    }

    fn err<T>(&self, kind: PickleErrorKind) -> R<T> {
        Err(PickleError {
            offset: self.at,
            kind,
        })
    }

    fn take(&mut self, n: u64, opcode: &'static str) -> R<&'a [u8]> {
        let left = self.data.len() - self.pos;
        if n > left as u64 {
            return self.err(PickleErrorKind::Truncated {
                opcode,
                needed: n,
                left,
            });
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u8(&mut self, op: &'static str) -> R<u8> {
        Ok(self.take(1, op)?[0])
    }

    fn le(&mut self, n: usize, op: &'static str) -> R<u64> {
        let b = self.take(n as u64, op)?;
        Ok(b.iter()
            .rev()
            .fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    /// A length-prefixed payload, bounds-checked before anything is allocated.
    fn payload(&mut self, len_bytes: usize, op: &'static str) -> R<&'a [u8]> {
        let len = self.le(len_bytes, op)?;
        // Check against the input first: a huge length with little data
        // left is a truncated or lying pickle, whatever the limit.
        let left = self.data.len() - self.pos;
        if len > left as u64 {
            return self.err(PickleErrorKind::Truncated {
                opcode: op,
                needed: len,
                left,
            });
        }
        if len > self.limits.max_string as u64 {
            return self.err(PickleErrorKind::Limit {
                what: "string length",
                limit: self.limits.max_string as u64,
            });
        }
        self.take(len, op)
    }

    fn line(&mut self, op: &'static str) -> R<&'a str> {
        let rest = &self.data[self.pos..];
        let Some(n) = rest.iter().take(1024).position(|&b| b == b'\n') else {
            return self.err(PickleErrorKind::Truncated {
                opcode: op,
                needed: 1,
                left: rest.len(),
            });
        };
        self.pos += n + 1;
        std::str::from_utf8(&rest[..n]).or_else(|_| self.err(PickleErrorKind::Utf8(op)))
    }

    fn alloc(&mut self, obj: Object, depth: u32) -> R<Slot> {
        if self.objects.len() >= self.limits.max_objects {
            return self.err(PickleErrorKind::Limit {
                what: "object count",
                limit: self.limits.max_objects as u64,
            });
        }
        if depth > self.limits.max_depth {
            return self.err(PickleErrorKind::Limit {
                what: "nesting depth",
                limit: u64::from(self.limits.max_depth),
            });
        }
        self.objects.push(obj);
        self.depths.push(depth);
        Ok(Slot {
            value: Value::Ref((self.objects.len() - 1) as ObjId),
            depth,
        })
    }

    fn push(&mut self, slot: Slot) -> R<()> {
        if self.stack.len() >= self.limits.max_stack {
            return self.err(PickleErrorKind::Limit {
                what: "stack size",
                limit: self.limits.max_stack as u64,
            });
        }
        self.stack.push(slot);
        Ok(())
    }

    fn push_value(&mut self, value: Value) -> R<()> {
        self.push(Slot { value, depth: 0 })
    }

    fn pop(&mut self, op: &'static str) -> R<Slot> {
        // Values above the innermost mark belong to it: popping below the
        // mark would corrupt it.
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return self.err(PickleErrorKind::StackUnderflow(op));
        }
        self.stack
            .pop()
            .map_or_else(|| self.err(PickleErrorKind::StackUnderflow(op)), Ok)
    }

    fn top(&self, op: &'static str) -> R<Slot> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return self.err(PickleErrorKind::StackUnderflow(op));
        }
        self.stack
            .last()
            .copied()
            .map_or_else(|| self.err(PickleErrorKind::StackUnderflow(op)), Ok)
    }

    /// Pops everything above the innermost mark, and the mark.
    fn pop_mark(&mut self, op: &'static str) -> R<Vec<Slot>> {
        let Some(mark) = self.marks.pop() else {
            return self.err(PickleErrorKind::NoMark(op));
        };
        Ok(self.stack.split_off(mark))
    }

    fn depth_of(items: &[Slot]) -> u32 {
        items.iter().map(|s| s.depth).max().unwrap_or(0) + 1
    }

    fn tuple(&mut self, items: Vec<Slot>) -> R<()> {
        let depth = Self::depth_of(&items);
        let slot = self.alloc(
            Object::Tuple(items.iter().map(|s| s.value).collect()),
            depth,
        )?;
        self.push(slot)
    }

    fn memo_put(&mut self, id: u64) -> R<()> {
        let top = self.top("PUT")?;
        if self.memo.len() >= self.limits.max_memo && !self.memo.contains_key(&id) {
            return self.err(PickleErrorKind::Limit {
                what: "memo size",
                limit: self.limits.max_memo as u64,
            });
        }
        self.memo.insert(id, top);
        Ok(())
    }

    fn memo_get(&mut self, id: u64) -> R<()> {
        match self.memo.get(&id).copied() {
            Some(slot) => self.push(slot),
            None => self.err(PickleErrorKind::MissingMemo(id)),
        }
    }

    fn string(&mut self, bytes: &[u8], op: &'static str) -> R<()> {
        let s = std::str::from_utf8(bytes).or_else(|_| self.err(PickleErrorKind::Utf8(op)))?;
        let slot = self.alloc(Object::Str(s.to_owned()), 0)?;
        self.push(slot)
    }

    fn int_from_le(&mut self, bytes: &[u8]) -> R<()> {
        if bytes.len() <= 8 {
            let mut v: i64 = 0;
            for (i, &b) in bytes.iter().enumerate() {
                v |= i64::from(b) << (8 * i);
            }
            // Sign-extend from the top byte.
            if let Some(&last) = bytes.last() {
                if last & 0x80 != 0 && bytes.len() < 8 {
                    v |= -1i64 << (8 * bytes.len());
                }
            }
            self.push_value(Value::Int(v))
        } else {
            let slot = self.alloc(Object::BigInt(bytes.to_vec()), 0)?;
            self.push(slot)
        }
    }

    /// The object a slot refers to, mutably, with its id.
    /// The object a value refers to, if it is a reference.
    fn obj(&self, v: Value) -> Option<&Object> {
        match v {
            Value::Ref(id) => self.objects.get(id as usize),
            _ => None,
        }
    }

    fn obj_mut(&mut self, v: Value) -> Option<(ObjId, &mut Object)> {
        match v {
            Value::Ref(id) => self.objects.get_mut(id as usize).map(|o| (id, o)),
            _ => None,
        }
    }

    fn describe(&self, v: Value) -> String {
        kind_of(&self.objects, v)
    }

    /// Appends `items` to the list or set `target`, raising its depth.
    fn extend(&mut self, target: Slot, items: Vec<Slot>, op: &'static str) -> R<()> {
        let depth = Self::depth_of(&items).max(target.depth);
        if depth > self.limits.max_depth {
            return self.err(PickleErrorKind::Limit {
                what: "nesting depth",
                limit: u64::from(self.limits.max_depth),
            });
        }
        let found = self.describe(target.value);
        match self.obj_mut(target.value) {
            Some((id, Object::List(v) | Object::Set(v))) => {
                v.extend(items.iter().map(|s| s.value));
                self.depths[id as usize] = self.depths[id as usize].max(depth);
                Ok(())
            }
            _ => self.err(PickleErrorKind::WrongType {
                opcode: op,
                expected: "a list or set",
                found,
            }),
        }
    }

    fn set_items(&mut self, target: Slot, items: Vec<Slot>, op: &'static str) -> R<()> {
        if items.len() % 2 != 0 {
            return self.err(PickleErrorKind::WrongType {
                opcode: op,
                expected: "key-value pairs",
                found: format!("{} values", items.len()),
            });
        }
        let depth = Self::depth_of(&items).max(target.depth);
        if depth > self.limits.max_depth {
            return self.err(PickleErrorKind::Limit {
                what: "nesting depth",
                limit: u64::from(self.limits.max_depth),
            });
        }
        let found = self.describe(target.value);
        match self.obj_mut(target.value) {
            Some((id, Object::Dict(d))) => {
                d.extend(items.chunks_exact(2).map(|kv| (kv[0].value, kv[1].value)));
                self.depths[id as usize] = self.depths[id as usize].max(depth);
                Ok(())
            }
            _ => self.err(PickleErrorKind::WrongType {
                opcode: op,
                expected: "a dict",
                found,
            }),
        }
    }

    fn global(&mut self, module: &str, name: &str) -> R<()> {
        match Global::resolve(module, name) {
            Ok(g) => {
                let slot = self.alloc(Object::Global(g), 0)?;
                self.push(slot)
            }
            Err(hint) => self.err(PickleErrorKind::ForbiddenGlobal {
                module: module.to_string(),
                name: name.to_string(),
                hint,
            }),
        }
    }

    /// `REDUCE` / `NEWOBJ`: records the call of an allow-listed global.
    fn call(&mut self, op: &'static str) -> R<()> {
        let args = self.pop(op)?;
        let func = self.pop(op)?;
        let func_g = match self.obj(func.value) {
            Some(Object::Global(g)) => Some(*g),
            _ => None,
        };
        let Some(func_g) = func_g else {
            let found = self.describe(func.value);
            return self.err(PickleErrorKind::WrongType {
                opcode: op,
                expected: "an allow-listed global to call",
                found,
            });
        };
        let arg_values = match self.obj(args.value) {
            Some(Object::Tuple(items)) => Some(items.clone()),
            _ => None,
        };
        let Some(arg_values) = arg_values else {
            let found = self.describe(args.value);
            return self.err(PickleErrorKind::WrongType {
                opcode: op,
                expected: "an argument tuple",
                found,
            });
        };
        // An OrderedDict is built empty, then filled by SETITEMS: make it a
        // dict now so that those work.
        let obj = if func_g == Global::OrderedDict {
            if !arg_values.is_empty() {
                return self.err(PickleErrorKind::WrongType {
                    opcode: op,
                    expected: "OrderedDict() without arguments",
                    found: format!("{} arguments", arg_values.len()),
                });
            }
            Object::Dict(Vec::new())
        } else {
            Object::Call {
                func: func_g,
                args: arg_values,
                state: None,
            }
        };
        let slot = self.alloc(obj, args.depth + 1)?;
        self.push(slot)
    }

    /// `BUILD`: sets the state of a recorded call. For an `OrderedDict` the
    /// state is its attributes (`_metadata` of a state dict): not data.
    fn build(&mut self) -> R<()> {
        let state = self.pop("BUILD")?;
        let target = self.top("BUILD")?;
        let found = self.describe(target.value);
        match self.obj_mut(target.value) {
            Some((_, Object::Dict(_))) => Ok(()),
            Some((_, Object::Call { state: s, .. })) => {
                *s = Some(state.value);
                Ok(())
            }
            _ => self.err(PickleErrorKind::WrongType {
                opcode: "BUILD",
                expected: "a dict or a recorded call",
                found,
            }),
        }
    }

    fn run(mut self) -> R<(Pickle, usize)> {
        loop {
            self.at = self.pos;
            let Some(&op) = self.data.get(self.pos) else {
                return self.err(PickleErrorKind::NoStop);
            };
            self.pos += 1;
            match op {
                0x80 => {
                    let proto = self.u8("PROTO")?;
                    if proto > 5 {
                        return self.err(PickleErrorKind::WrongType {
                            opcode: "PROTO",
                            expected: "protocol 0 to 5",
                            found: proto.to_string(),
                        });
                    }
                }
                0x95 => {
                    // FRAME: only a hint for buffered readers.
                    self.le(8, "FRAME")?;
                }
                b'.' => {
                    if !self.marks.is_empty() || self.stack.len() != 1 {
                        return self.err(PickleErrorKind::BadStop(self.stack.len()));
                    }
                    let root = self.stack[0].value;
                    return Ok((
                        Pickle {
                            objects: self.objects,
                            root,
                        },
                        self.pos,
                    ));
                }
                b'(' => {
                    if self.marks.len() >= self.limits.max_stack {
                        return self.err(PickleErrorKind::Limit {
                            what: "mark count",
                            limit: self.limits.max_stack as u64,
                        });
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop("POP")?;
                }
                b'1' => {
                    self.pop_mark("POP_MARK")?;
                }
                b'2' => {
                    let top = self.top("DUP")?;
                    self.push(top)?;
                }
                b'N' => self.push_value(Value::None)?,
                0x88 => self.push_value(Value::Bool(true))?,
                0x89 => self.push_value(Value::Bool(false))?,
                b'J' => {
                    let v = self.le(4, "BININT")? as u32 as i32;
                    self.push_value(Value::Int(i64::from(v)))?;
                }
                b'K' => {
                    let v = self.u8("BININT1")?;
                    self.push_value(Value::Int(i64::from(v)))?;
                }
                b'M' => {
                    let v = self.le(2, "BININT2")?;
                    self.push_value(Value::Int(v as i64))?;
                }
                0x8a => {
                    let b = self.payload(1, "LONG1")?;
                    self.int_from_le(b)?;
                }
                0x8b => {
                    let b = self.payload(4, "LONG4")?;
                    self.int_from_le(b)?;
                }
                b'G' => {
                    let b = self.take(8, "BINFLOAT")?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.push_value(Value::Float(f64::from_be_bytes(a)))?;
                }
                0x8c => {
                    let b = self.payload(1, "SHORT_BINUNICODE")?;
                    self.string(b, "SHORT_BINUNICODE")?;
                }
                b'X' => {
                    let b = self.payload(4, "BINUNICODE")?;
                    self.string(b, "BINUNICODE")?;
                }
                0x8d => {
                    let b = self.payload(8, "BINUNICODE8")?;
                    self.string(b, "BINUNICODE8")?;
                }
                // Python 2 `str` (legacy checkpoints written by Python 2).
                b'U' => {
                    let b = self.payload(1, "SHORT_BINSTRING")?;
                    self.string(b, "SHORT_BINSTRING")?;
                }
                b'T' => {
                    let b = self.payload(4, "BINSTRING")?;
                    self.string(b, "BINSTRING")?;
                }
                b'C' | b'B' | 0x8e => {
                    let (n, name) = match op {
                        b'C' => (1, "SHORT_BINBYTES"),
                        b'B' => (4, "BINBYTES"),
                        _ => (8, "BINBYTES8"),
                    };
                    let b = self.payload(n, name)?;
                    let slot = self.alloc(Object::Bytes(b.to_vec()), 0)?;
                    self.push(slot)?;
                }
                b'}' => {
                    let slot = self.alloc(Object::Dict(Vec::new()), 1)?;
                    self.push(slot)?;
                }
                b']' => {
                    let slot = self.alloc(Object::List(Vec::new()), 1)?;
                    self.push(slot)?;
                }
                b')' => self.tuple(Vec::new())?,
                0x8f => {
                    let slot = self.alloc(Object::Set(Vec::new()), 1)?;
                    self.push(slot)?;
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop("TUPLE1/2/3")?);
                    }
                    items.reverse();
                    self.tuple(items)?;
                }
                b't' => {
                    let items = self.pop_mark("TUPLE")?;
                    self.tuple(items)?;
                }
                b'l' => {
                    let items = self.pop_mark("LIST")?;
                    let depth = Self::depth_of(&items);
                    let slot =
                        self.alloc(Object::List(items.iter().map(|s| s.value).collect()), depth)?;
                    self.push(slot)?;
                }
                0x91 => {
                    let items = self.pop_mark("FROZENSET")?;
                    let depth = Self::depth_of(&items);
                    let slot =
                        self.alloc(Object::Set(items.iter().map(|s| s.value).collect()), depth)?;
                    self.push(slot)?;
                }
                b'd' => {
                    let items = self.pop_mark("DICT")?;
                    let slot = self.alloc(Object::Dict(Vec::new()), 1)?;
                    self.set_items(slot, items, "DICT")?;
                    let depth = self.depths[self.objects.len() - 1];
                    self.push(Slot { depth, ..slot })?;
                }
                b'a' => {
                    let item = self.pop("APPEND")?;
                    let list = self.top("APPEND")?;
                    self.extend(list, vec![item], "APPEND")?;
                }
                b'e' | 0x90 => {
                    let name = if op == b'e' { "APPENDS" } else { "ADDITEMS" };
                    let items = self.pop_mark(name)?;
                    let list = self.top(name)?;
                    self.extend(list, items, name)?;
                }
                b's' => {
                    let v = self.pop("SETITEM")?;
                    let k = self.pop("SETITEM")?;
                    let d = self.top("SETITEM")?;
                    self.set_items(d, vec![k, v], "SETITEM")?;
                }
                b'u' => {
                    let items = self.pop_mark("SETITEMS")?;
                    let d = self.top("SETITEMS")?;
                    self.set_items(d, items, "SETITEMS")?;
                }
                b'q' => {
                    let id = self.le(1, "BINPUT")?;
                    self.memo_put(id)?;
                }
                b'r' => {
                    let id = self.le(4, "LONG_BINPUT")?;
                    self.memo_put(id)?;
                }
                0x94 => {
                    let id = self.memo.len() as u64;
                    self.memo_put(id)?;
                }
                b'h' => {
                    let id = self.le(1, "BINGET")?;
                    self.memo_get(id)?;
                }
                b'j' => {
                    let id = self.le(4, "LONG_BINGET")?;
                    self.memo_get(id)?;
                }
                b'c' => {
                    let module = self.line("GLOBAL")?;
                    let name = self.line("GLOBAL")?;
                    self.global(module, name)?;
                }
                0x93 => {
                    let name = self.pop("STACK_GLOBAL")?;
                    let module = self.pop("STACK_GLOBAL")?;
                    let text = |m: &Machine, v: Value| match m.obj(v) {
                        Some(Object::Str(s)) => Some(s.clone()),
                        _ => None,
                    };
                    match (text(&self, module.value), text(&self, name.value)) {
                        (Some(m), Some(n)) => self.global(&m, &n)?,
                        _ => {
                            return self.err(PickleErrorKind::WrongType {
                                opcode: "STACK_GLOBAL",
                                expected: "two strings",
                                found: format!(
                                    "{} and {}",
                                    self.describe(module.value),
                                    self.describe(name.value)
                                ),
                            })
                        }
                    }
                }
                b'R' => self.call("REDUCE")?,
                0x81 => self.call("NEWOBJ")?,
                b'b' => self.build()?,
                b'Q' => {
                    let pid = self.pop("BINPERSID")?;
                    let slot = self.alloc(Object::PersistentId(pid.value), pid.depth + 1)?;
                    self.push(slot)?;
                }
                other => return self.err(PickleErrorKind::UnknownOpcode(other)),
            }
        }
    }
}

fn kind_of(objects: &[Object], v: Value) -> String {
    match v {
        Value::None => "None".into(),
        Value::Bool(_) => "a bool".into(),
        Value::Int(_) => "an int".into(),
        Value::Float(_) => "a float".into(),
        Value::Ref(id) => match objects.get(id as usize) {
            Some(Object::Str(s)) => format!("the str {:?}", truncate(s)),
            Some(Object::Bytes(_)) => "bytes".into(),
            Some(Object::BigInt(_)) => "a big int".into(),
            Some(Object::Tuple(t)) => format!("a tuple of {}", t.len()),
            Some(Object::List(_)) => "a list".into(),
            Some(Object::Dict(_)) => "a dict".into(),
            Some(Object::Set(_)) => "a set".into(),
            Some(Object::Global(g)) => format!("global {g:?}"),
            Some(Object::Call { func, .. }) => format!("a call of {func:?}"),
            Some(Object::PersistentId(_)) => "a persistent id".into(),
            None => "a dangling reference".into(),
        },
    }
}

/// The first 40 characters of a string, for messages.
fn truncate(s: &str) -> &str {
    s.char_indices().nth(40).map_or(s, |(i, _)| &s[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(bytes: &[u8]) -> Result<Pickle, PickleError> {
        Pickle::parse(bytes, &Limits::default()).map(|(p, _)| p)
    }

    #[test]
    fn memo_holds_references() {
        // {'a': [1], 'b': <memo 1>}, then 2 appended to the shared list.
        let p =
            run(b"\x80\x02}q\x00(X\x01\x00\x00\x00a]q\x01K\x01aX\x01\x00\x00\x00bh\x01u.").unwrap();
        let Some(Object::Dict(d)) = p.deref(p.root()) else {
            panic!()
        };
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].1, d[1].1);
        assert_eq!(p.as_seq(d[1].1), Some(&[Value::Int(1)][..]));
    }

    #[test]
    fn ints() {
        let p = run(b"\x8a\x02\xff\x7f.").unwrap();
        assert_eq!(p.root(), Value::Int(0x7fff));
        let p = run(b"\x8a\x01\xff.").unwrap();
        assert_eq!(p.root(), Value::Int(-1));
        let p = run(b"J\xfe\xff\xff\xff.").unwrap();
        assert_eq!(p.root(), Value::Int(-2));
        let p = run(b"\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.").unwrap();
        assert!(matches!(p.deref(p.root()), Some(Object::BigInt(b)) if b.len() == 9));
    }

    #[test]
    fn hostile_inputs_fail_cleanly() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "without STOP"),
            (b"\x80\x02}", "without STOP"),
            (b"t.", "without a MARK"),
            (b"0.", "empty stack"),
            (b"(0.", "empty stack"),
            (b"j\xff\xff\xff\x7f.", "never stored"),
            (
                b"X\xff\xff\xff\xff\x00\x00\x00",
                "needs 4294967295 more bytes",
            ),
            (b"\xff", "opcode 0xff"),
            (b"cposix\nsystem\n", "posix.system is not allowed"),
            (
                b"\x8c\x08builtins\x8c\x04eval\x93.",
                "builtins.eval is not allowed",
            ),
            (b"K\x01K\x02.", "STOP with 2 values"),
            (b"K\x01)R.", "an allow-listed global"),
        ];
        for (bytes, want) in cases {
            let e = run(bytes).unwrap_err().to_string();
            assert!(e.contains(want), "{bytes:?}: {e}");
        }
    }

    #[test]
    fn deep_nesting_hits_the_depth_limit() {
        let mut p = vec![b'N'];
        p.extend(std::iter::repeat(0x85).take(5000));
        p.push(b'.');
        let e = run(&p).unwrap_err();
        assert!(e.to_string().contains("nesting depth"), "{e}");
        // A self-referencing list is fine to build (it is a reference).
        let p = run(b"]q\x00h\x00a.").unwrap();
        assert!(matches!(p.deref(p.root()), Some(Object::List(v)) if v.len() == 1));
    }

    #[test]
    fn exponential_memo_graph_is_cheap() {
        // t0 = (); t(i+1) = (t_i, t_i): 2^60 leaves, 60 objects.
        let mut p = b")q\x000".to_vec();
        for i in 0..60u8 {
            p.extend_from_slice(&[b'h', i, b'h', i, 0x86, b'q', i + 1, b'0']);
        }
        p.extend_from_slice(&[b'h', 60, b'.']);
        let pk = run(&p).unwrap();
        assert_eq!(pk.objects().len(), 61);
    }
}
