//! A restricted pickle interpreter that never calls anything.
//!
//! It accepts exactly the opcodes torch's own restricted unpickler accepts
//! (`torch.load(weights_only=True)`, `torch/_weights_only_unpickler.py` in
//! torch 2.15), under its conditions (`APPEND` only to a list, a persistent
//! id only a tuple naming a storage or an int), and refuses every other one
//! by name and offset ([`PickleErrorKind::Refused`]): a loader that
//! promises torch's safety accepts nothing torch refuses. It builds plain
//! values. Globals must be on the allow-list
//! ([`Global::resolve`]); calling one (`REDUCE`, `NEWOBJ`) only records a
//! [`Object::Call`]. The checkpoint layer decides what such records mean.
//!
//! Containers live in an arena ([`Pickle::objects`]) and values refer to them
//! by [`ObjId`], so the memo holds references, not copies: an object stored
//! once and fetched twice is one object, exponential memo graphs cost
//! nothing to build, and dropping the arena is not recursive. Every use of
//! an object shares it: a call records a reference to its argument tuple,
//! never a copy, so a large memoized tuple passed to a thousand calls is
//! held once.
//!
//! Limits on the input size, object count, nesting depth, stack, memo and
//! string lengths, and one byte budget over everything the interpreter holds
//! ([`Limits::max_bytes`], counted as it grows and checked before each
//! allocation), turn hostile pickles into errors in bounded time and memory.

use std::collections::HashMap;
use std::mem::size_of;

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
    /// `REDUCE`, `NEWOBJ` or `NEWOBJ_EX` of an allow-listed global: a
    /// record of the call, never performed. `state` is set by a later
    /// `BUILD`.
    Call {
        /// What would have been called.
        func: Global,
        /// The argument tuple: the id of an [`Object::Tuple`], shared with
        /// every other use of that tuple (see [`Pickle::call`]).
        args: ObjId,
        /// The state a `BUILD` gave the result, if any.
        state: Option<Value>,
    },
    /// A persistent id (`BINPERSID`): in checkpoints, a storage reference.
    PersistentId(Value),
}

/// Limits that stop hostile pickles.
#[derive(Debug, Clone)]
#[non_exhaustive]
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
    /// Most bytes the interpreter may hold at once: the arena's objects and
    /// what they own (strings, byte strings, big integers, every
    /// container's slots), the stack, the marks and the memo. Counted by
    /// capacity as each of them grows and checked before the allocation is
    /// made, so that a small pickle cannot make the process allocate more;
    /// exceeding it is [`PickleErrorKind::Budget`] naming `max_bytes`.
    ///
    /// 256 MiB by default: a state dict costs about 1 KiB per tensor here,
    /// so checkpoints of a few hundred thousand tensors fit, while the
    /// worst case stays well under 1 GiB of memory.
    pub max_bytes: usize,
}

tensorfile_core::with_fields!(Limits {
    with_max_input => max_input: usize,
    with_max_objects => max_objects: usize,
    with_max_depth => max_depth: u32,
    with_max_stack => max_stack: usize,
    with_max_memo => max_memo: usize,
    with_max_string => max_string: usize,
    with_max_bytes => max_bytes: usize,
});

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_input: 1 << 30,
            max_objects: 20_000_000,
            max_depth: 1000,
            max_stack: 10_000_000,
            max_memo: 20_000_000,
            max_string: 64 << 20,
            max_bytes: 256 << 20,
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
    /// A pickle opcode that `torch.load(weights_only=True)` refuses
    /// ("Unsupported operand"), refused here too.
    #[error("opcode {opcode} (0x{code:02x}) is refused: torch.load(weights_only=True) does not accept it")]
    Refused {
        /// The opcode's name in Python's `pickle` module (`POP`).
        opcode: &'static str,
        /// Its byte.
        code: u8,
    },
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
    /// The byte budget of [`Limits`] would be exceeded by the allocation
    /// this opcode needs.
    #[error("the interpreter would hold {needed} B, over its budget {budget} = {limit} B")]
    Budget {
        /// The budget's name: the field of [`Limits`] (`max_bytes`).
        budget: &'static str,
        /// Its value, in bytes.
        limit: u64,
        /// The bytes held had the allocation been made.
        needed: u64,
    },
    /// The system could not allocate memory within the budget.
    #[error("cannot allocate {0} bytes")]
    OutOfMemory(u64),
    /// `STOP` with a stack that does not hold exactly one value.
    #[error("STOP with {0} values on the stack (expected 1)")]
    BadStop(usize),
    /// `STOP` while a `MARK` is still open (a MARK with no opcode to close it).
    #[error("STOP with {marks} MARK(s) still open ({values} values on the stack)")]
    OpenMark {
        /// How many MARKs are open.
        marks: usize,
        /// How many values are on the stack, the marked ones included.
        values: usize,
    },
}

/// A parsed pickle: the arena and the root value.
#[derive(Debug, Clone)]
pub struct Pickle {
    objects: Vec<Object>,
    root: Value,
    /// The bytes the interpreter held when it stopped.
    held: usize,
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

    /// The function and the arguments of a recorded call, if `v` is one.
    pub fn call(&self, v: Value) -> Option<(Global, &[Value])> {
        match self.deref(v) {
            Some(Object::Call { func, args, .. }) => {
                Some((*func, self.as_seq(Value::Ref(*args)).unwrap_or_default()))
            }
            _ => None,
        }
    }

    /// The bytes the interpreter held when the pickle stopped, as counted
    /// against [`Limits::max_bytes`] (the arena, and the stack and memo it
    /// dropped at the end).
    pub fn bytes_held(&self) -> usize {
        self.held
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

/// The bytes the interpreter holds, against [`Limits::max_bytes`].
struct Budget {
    used: usize,
    limit: usize,
}

impl Budget {
    /// Counts `bytes` more, or refuses if that passes the limit.
    fn charge(&mut self, bytes: usize) -> Result<(), PickleErrorKind> {
        match self.used.checked_add(bytes) {
            Some(n) if n <= self.limit => {
                self.used = n;
                Ok(())
            }
            n => Err(PickleErrorKind::Budget {
                budget: "max_bytes",
                limit: self.limit as u64,
                needed: n.map_or(u64::MAX, |n| n as u64),
            }),
        }
    }

    /// Makes room in `v` for `additional` more items: the growth of its
    /// capacity is charged before it is allocated (doubling, as `Vec` does,
    /// so that repeated pushes stay linear).
    fn reserve<T>(&mut self, v: &mut Vec<T>, additional: usize) -> Result<(), PickleErrorKind> {
        let len = v.len();
        let cap = v.capacity();
        let need = len.saturating_add(additional);
        if need <= cap {
            return Ok(());
        }
        let target = need.max(cap.saturating_mul(2)).max(4);
        let elem = size_of::<T>();
        self.charge((target - cap).saturating_mul(elem))?;
        v.try_reserve_exact(target - len)
            .map_err(|_| PickleErrorKind::OutOfMemory(target.saturating_mul(elem) as u64))?;
        // The allocator may give more than asked for: count all of it.
        let extra = v.capacity().saturating_sub(target).saturating_mul(elem);
        self.used = self.used.saturating_add(extra);
        Ok(())
    }
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    /// Where the current opcode began, for errors.
    at: usize,
    limits: &'a Limits,
    budget: Budget,
    objects: Vec<Object>,
    /// Nesting depth of each object, parallel to `objects`.
    depths: Vec<u32>,
    stack: Vec<Slot>,
    marks: Vec<usize>,
    /// The memo, by id. A map, not a vector indexed by id: a pickle of a
    /// few bytes may store one entry at id 4 billion, and costs one entry.
    memo: HashMap<u32, Slot>,
}

type R<T> = Result<T, PickleError>;

impl<'a> Machine<'a> {
    fn new(data: &'a [u8], limits: &'a Limits) -> Machine<'a> {
        Machine {
            data,
            pos: 0,
            at: 0,
            limits,
            budget: Budget {
                used: 0,
                limit: limits.max_bytes,
            },
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

    /// A budget failure, at the current opcode.
    fn fail(&self, kind: PickleErrorKind) -> PickleError {
        PickleError {
            offset: self.at,
            kind,
        }
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

    /// A new vector holding `items`, its bytes charged first.
    fn vec_of<T>(&mut self, items: impl ExactSizeIterator<Item = T>) -> R<Vec<T>> {
        let mut v = Vec::new();
        self.budget
            .reserve(&mut v, items.len())
            .map_err(|k| self.fail(k))?;
        v.extend(items);
        Ok(v)
    }

    /// An owned copy of `bytes`, charged first.
    fn owned_bytes(&mut self, bytes: &[u8]) -> R<Vec<u8>> {
        self.vec_of(bytes.iter().copied())
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
        let at = self.at;
        let fail = |kind| PickleError { offset: at, kind };
        self.budget.reserve(&mut self.objects, 1).map_err(fail)?;
        self.budget.reserve(&mut self.depths, 1).map_err(fail)?;
        self.objects.push(obj);
        self.depths.push(depth);
        Ok(Slot {
            value: Value::Ref((self.objects.len() - 1) as ObjId),
            depth,
        })
    }

    /// Allocates `obj` and pushes it.
    fn alloc_push(&mut self, obj: Object, depth: u32) -> R<()> {
        let slot = self.alloc(obj, depth)?;
        self.push(slot)
    }

    fn push(&mut self, slot: Slot) -> R<()> {
        if self.stack.len() >= self.limits.max_stack {
            return self.err(PickleErrorKind::Limit {
                what: "stack size",
                limit: self.limits.max_stack as u64,
            });
        }
        let at = self.at;
        self.budget
            .reserve(&mut self.stack, 1)
            .map_err(|kind| PickleError { offset: at, kind })?;
        self.stack.push(slot);
        Ok(())
    }

    fn push_value(&mut self, value: Value) -> R<()> {
        self.push(Slot { value, depth: 0 })
    }

    /// The stack length below which the innermost mark's values end.
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    /// Checks that `n` values lie above the innermost mark; returns where
    /// they begin. Popping below the mark would corrupt it.
    fn above(&self, n: usize, op: &'static str) -> R<usize> {
        match self.stack.len().checked_sub(n) {
            Some(from) if from >= self.floor() => Ok(from),
            _ => self.err(PickleErrorKind::StackUnderflow(op)),
        }
    }

    fn pop(&mut self, op: &'static str) -> R<Slot> {
        let from = self.above(1, op)?;
        let slot = self.stack[from];
        self.stack.truncate(from);
        Ok(slot)
    }

    fn top(&self, op: &'static str) -> R<Slot> {
        let from = self.above(1, op)?;
        Ok(self.stack[from])
    }

    /// Closes the innermost mark: returns where its values begin (they
    /// stay on the stack for the caller to take).
    fn close_mark(&mut self, op: &'static str) -> R<usize> {
        match self.marks.pop() {
            Some(mark) => Ok(mark),
            None => self.err(PickleErrorKind::NoMark(op)),
        }
    }

    /// The value just below stack position `from` (the container that the
    /// values from `from` on are added to), which must lie above the
    /// innermost mark.
    fn below(&self, from: usize, op: &'static str) -> R<Slot> {
        if from <= self.floor() {
            return self.err(PickleErrorKind::StackUnderflow(op));
        }
        Ok(self.stack[from - 1])
    }

    fn depth_of(items: &[Slot]) -> u32 {
        items.iter().map(|s| s.depth).max().unwrap_or(0) + 1
    }

    /// The values from stack position `from` on, as a new vector, with
    /// their container's depth; they are taken off the stack.
    fn take_values(&mut self, from: usize) -> R<(Vec<Value>, u32)> {
        let depth = Self::depth_of(&self.stack[from..]);
        let mut v = Vec::new();
        self.budget
            .reserve(&mut v, self.stack.len() - from)
            .map_err(|k| self.fail(k))?;
        v.extend(self.stack[from..].iter().map(|s| s.value));
        self.stack.truncate(from);
        Ok((v, depth))
    }

    /// Makes a tuple of the values from stack position `from` on.
    fn tuple(&mut self, from: usize) -> R<()> {
        let (items, depth) = self.take_values(from)?;
        self.alloc_push(Object::Tuple(items), depth)
    }

    fn memo_put(&mut self, id: u32, op: &'static str) -> R<()> {
        let top = self.top(op)?;
        if !self.memo.contains_key(&id) {
            if self.memo.len() >= self.limits.max_memo {
                return self.err(PickleErrorKind::Limit {
                    what: "memo size",
                    limit: self.limits.max_memo as u64,
                });
            }
            self.grow_memo()?;
        }
        self.memo.insert(id, top);
        Ok(())
    }

    /// Makes room for one more memo entry, charging a growth of the map's
    /// table before it is allocated (doubling, as the map itself does).
    fn grow_memo(&mut self) -> R<()> {
        let (len, cap) = (self.memo.len(), self.memo.capacity());
        if len < cap {
            return Ok(());
        }
        // A table entry: the key, the slot and a control byte, with the
        // table's 1/8 spare room.
        let entry = (size_of::<(u32, Slot)>() + 1) * 8 / 7 + 1;
        let target = cap.saturating_mul(2).max(4);
        self.budget
            .charge((target - cap).saturating_mul(entry))
            .map_err(|k| self.fail(k))?;
        self.memo
            .try_reserve(target - len)
            .map_err(|_| self.fail(PickleErrorKind::OutOfMemory((target * entry) as u64)))?;
        // The table may round up: count what it holds beyond the target.
        let extra = self.memo.capacity().saturating_sub(target);
        self.budget.used = self.budget.used.saturating_add(extra.saturating_mul(entry));
        Ok(())
    }

    fn memo_get(&mut self, id: u32) -> R<()> {
        let slot = self.memo.get(&id).copied();
        match slot {
            Some(slot) => self.push(slot),
            None => self.err(PickleErrorKind::MissingMemo(u64::from(id))),
        }
    }

    fn string(&mut self, bytes: &[u8], op: &'static str) -> R<()> {
        let owned = self.owned_bytes(bytes)?;
        let s = String::from_utf8(owned).or_else(|_| self.err(PickleErrorKind::Utf8(op)))?;
        self.alloc_push(Object::Str(s), 0)
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
            let owned = self.owned_bytes(bytes)?;
            self.alloc_push(Object::BigInt(owned), 0)
        }
    }

    /// The object a value refers to, if it is a reference.
    fn obj(&self, v: Value) -> Option<&Object> {
        match v {
            Value::Ref(id) => self.objects.get(id as usize),
            _ => None,
        }
    }

    fn describe(&self, v: Value) -> String {
        kind_of(&self.objects, v)
    }

    /// Appends the values from stack position `from` on to the list just
    /// below them (not a set: torch appends only to lists), raising its
    /// depth; they are taken off the stack.
    fn extend(&mut self, from: usize, op: &'static str) -> R<()> {
        let target = self.below(from, op)?;
        let depth = Self::depth_of(&self.stack[from..]).max(target.depth);
        if depth > self.limits.max_depth {
            return self.err(PickleErrorKind::Limit {
                what: "nesting depth",
                limit: u64::from(self.limits.max_depth),
            });
        }
        let found = self.describe(target.value);
        let at = self.at;
        let id = match target.value {
            Value::Ref(id) => id as usize,
            _ => usize::MAX,
        };
        match self.objects.get_mut(id) {
            Some(Object::List(v)) => {
                self.budget
                    .reserve(v, self.stack.len() - from)
                    .map_err(|kind| PickleError { offset: at, kind })?;
                v.extend(self.stack[from..].iter().map(|s| s.value));
                self.depths[id] = self.depths[id].max(depth);
                self.stack.truncate(from);
                Ok(())
            }
            _ => self.err(PickleErrorKind::WrongType {
                opcode: op,
                expected: "a list",
                found,
            }),
        }
    }

    /// Adds the key-value pairs from stack position `from` on to the dict
    /// `target` (just below them, or a new one); they are taken off the stack.
    fn set_items(&mut self, target: Slot, from: usize, op: &'static str) -> R<()> {
        let n = self.stack.len() - from;
        if !n.is_multiple_of(2) {
            return self.err(PickleErrorKind::WrongType {
                opcode: op,
                expected: "key-value pairs",
                found: format!("{n} values"),
            });
        }
        let depth = Self::depth_of(&self.stack[from..]).max(target.depth);
        if depth > self.limits.max_depth {
            return self.err(PickleErrorKind::Limit {
                what: "nesting depth",
                limit: u64::from(self.limits.max_depth),
            });
        }
        let found = self.describe(target.value);
        let at = self.at;
        let id = match target.value {
            Value::Ref(id) => id as usize,
            _ => usize::MAX,
        };
        match self.objects.get_mut(id) {
            Some(Object::Dict(d)) => {
                self.budget
                    .reserve(d, n / 2)
                    .map_err(|kind| PickleError { offset: at, kind })?;
                d.extend(
                    self.stack[from..]
                        .chunks_exact(2)
                        .map(|kv| (kv[0].value, kv[1].value)),
                );
                self.depths[id] = self.depths[id].max(depth);
                self.stack.truncate(from);
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
            Ok(g) => self.alloc_push(Object::Global(g), 0),
            Err(hint) => self.err(PickleErrorKind::ForbiddenGlobal {
                module: truncate(module).to_string(),
                name: truncate(name).to_string(),
                hint,
            }),
        }
    }

    /// `REDUCE` / `NEWOBJ`: records the call of an allow-listed global,
    /// with a reference to its argument tuple.
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
        let (args_id, n_args) = match (args.value, self.obj(args.value)) {
            (Value::Ref(id), Some(Object::Tuple(items))) => (id, items.len()),
            _ => {
                let found = self.describe(args.value);
                return self.err(PickleErrorKind::WrongType {
                    opcode: op,
                    expected: "an argument tuple",
                    found,
                });
            }
        };
        // An OrderedDict is built empty, then filled by SETITEMS: make it a
        // dict now so that those work.
        let obj = if func_g == Global::OrderedDict {
            if n_args != 0 {
                return self.err(PickleErrorKind::WrongType {
                    opcode: op,
                    expected: "OrderedDict() without arguments",
                    found: format!("{n_args} arguments"),
                });
            }
            Object::Dict(Vec::new())
        } else {
            Object::Call {
                func: func_g,
                args: args_id,
                state: None,
            }
        };
        self.alloc_push(obj, args.depth + 1)
    }

    /// `BUILD`: sets the state of a recorded call. For an `OrderedDict` the
    /// state is its attributes (`_metadata` of a state dict): not data.
    fn build(&mut self) -> R<()> {
        let state = self.pop("BUILD")?;
        let target = self.top("BUILD")?;
        let found = self.describe(target.value);
        let id = match target.value {
            Value::Ref(id) => id as usize,
            _ => usize::MAX,
        };
        match self.objects.get_mut(id) {
            Some(Object::Dict(_)) => Ok(()),
            Some(Object::Call { state: s, .. }) => {
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

    /// `BINPERSID` takes what torch's unpickler takes: an int, or a tuple
    /// whose first item, if any, is the string "storage".
    fn check_persistent_id(&self, pid: Value) -> R<()> {
        let ok = match (pid, self.obj(pid)) {
            (Value::Int(_), _) => true,
            (_, Some(Object::Tuple(items))) => match items.first() {
                None => true,
                Some(&first) => matches!(self.obj(first), Some(Object::Str(s)) if s == "storage"),
            },
            _ => false,
        };
        if ok {
            return Ok(());
        }
        self.err(PickleErrorKind::WrongType {
            opcode: "BINPERSID",
            expected: "an int, or a tuple naming a storage",
            found: self.describe(pid),
        })
    }

    fn run(mut self) -> R<(Pickle, usize)> {
        loop {
            self.at = self.pos;
            let Some(&op) = self.data.get(self.pos) else {
                return self.err(PickleErrorKind::NoStop);
            };
            self.pos += 1;
            if let Some(opcode) = torch_refuses(op) {
                return self.err(PickleErrorKind::Refused { opcode, code: op });
            }
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
                b'.' => {
                    if !self.marks.is_empty() {
                        return self.err(PickleErrorKind::OpenMark {
                            marks: self.marks.len(),
                            values: self.stack.len(),
                        });
                    }
                    if self.stack.len() != 1 {
                        return self.err(PickleErrorKind::BadStop(self.stack.len()));
                    }
                    let root = self.stack[0].value;
                    return Ok((
                        Pickle {
                            objects: self.objects,
                            root,
                            held: self.budget.used,
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
                    let at = self.at;
                    self.budget
                        .reserve(&mut self.marks, 1)
                        .map_err(|kind| PickleError { offset: at, kind })?;
                    self.marks.push(self.stack.len());
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
                b'G' => {
                    let b = self.take(8, "BINFLOAT")?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.push_value(Value::Float(f64::from_be_bytes(a)))?;
                }
                b'X' => {
                    let b = self.payload(4, "BINUNICODE")?;
                    self.string(b, "BINUNICODE")?;
                }
                // Python 2 `str` (legacy checkpoints written by Python 2).
                b'U' => {
                    let b = self.payload(1, "SHORT_BINSTRING")?;
                    self.string(b, "SHORT_BINSTRING")?;
                }
                b'}' => self.alloc_push(Object::Dict(Vec::new()), 1)?,
                b']' => self.alloc_push(Object::List(Vec::new()), 1)?,
                b')' => self.alloc_push(Object::Tuple(Vec::new()), 1)?,
                0x8f => self.alloc_push(Object::Set(Vec::new()), 1)?,
                0x85..=0x87 => {
                    let from = self.above(usize::from(op - 0x84), "TUPLE1/2/3")?;
                    self.tuple(from)?;
                }
                b't' => {
                    let from = self.close_mark("TUPLE")?;
                    self.tuple(from)?;
                }
                b'a' => {
                    let from = self.above(1, "APPEND")?;
                    self.extend(from, "APPEND")?;
                }
                b'e' => {
                    let from = self.close_mark("APPENDS")?;
                    self.extend(from, "APPENDS")?;
                }
                b's' => {
                    let from = self.above(2, "SETITEM")?;
                    let d = self.below(from, "SETITEM")?;
                    self.set_items(d, from, "SETITEM")?;
                }
                b'u' => {
                    let from = self.close_mark("SETITEMS")?;
                    let d = self.below(from, "SETITEMS")?;
                    self.set_items(d, from, "SETITEMS")?;
                }
                b'q' => {
                    let id = self.le(1, "BINPUT")? as u32;
                    self.memo_put(id, "BINPUT")?;
                }
                b'r' => {
                    let id = self.le(4, "LONG_BINPUT")? as u32;
                    self.memo_put(id, "LONG_BINPUT")?;
                }
                b'h' => {
                    let id = self.le(1, "BINGET")? as u32;
                    self.memo_get(id)?;
                }
                b'j' => {
                    let id = self.le(4, "LONG_BINGET")? as u32;
                    self.memo_get(id)?;
                }
                b'c' => {
                    let module = self.line("GLOBAL")?;
                    let name = self.line("GLOBAL")?;
                    self.global(module, name)?;
                }
                b'R' => self.call("REDUCE")?,
                0x81 => self.call("NEWOBJ")?,
                b'b' => self.build()?,
                b'Q' => {
                    let pid = self.pop("BINPERSID")?;
                    self.check_persistent_id(pid.value)?;
                    self.alloc_push(Object::PersistentId(pid.value), pid.depth + 1)?;
                }
                other => return self.err(PickleErrorKind::UnknownOpcode(other)),
            }
        }
    }
}

/// The opcodes of Python's pickle protocols 0 to 5 that torch's restricted
/// unpickler refuses ("Unsupported operand"), by name. Bytes that are no
/// opcode at all are [`PickleErrorKind::UnknownOpcode`].
fn torch_refuses(op: u8) -> Option<&'static str> {
    Some(match op {
        b'0' => "POP",
        b'1' => "POP_MARK",
        b'2' => "DUP",
        b'F' => "FLOAT",
        b'I' => "INT",
        b'L' => "LONG",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'V' => "UNICODE",
        b'P' => "PERSID",
        b'p' => "PUT",
        b'g' => "GET",
        b'l' => "LIST",
        b'd' => "DICT",
        b'i' => "INST",
        b'o' => "OBJ",
        b'B' => "BINBYTES",
        b'C' => "SHORT_BINBYTES",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x8b => "LONG4",
        0x8c => "SHORT_BINUNICODE",
        0x8d => "BINUNICODE8",
        0x8e => "BINBYTES8",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        0x92 => "NEWOBJ_EX",
        0x93 => "STACK_GLOBAL",
        0x94 => "MEMOIZE",
        0x95 => "FRAME",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

fn kind_of(objects: &[Object], v: Value) -> String {
    match v {
        Value::None => "None".into(),
        Value::Bool(_) => "a bool".into(),
        Value::Int(_) => "an int".into(),
        Value::Float(_) => "a float".into(),
        Value::Ref(id) => match objects.get(id as usize) {
            Some(Object::Str(s)) => format!("the str {:?}", truncate(s)),
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
            (b"a.", "empty stack"),
            (b"(\x85.", "empty stack"),
            (b"j\xff\xff\xff\x7f.", "never stored"),
            (
                b"X\xff\xff\xff\xff\x00\x00\x00",
                "needs 4294967295 more bytes",
            ),
            (b"\xff", "opcode 0xff"),
            (b"cposix\nsystem\n", "posix.system is not allowed"),
            (b"cbuiltins\neval\n.", "builtins.eval is not allowed"),
            (b"ctorch\nhalf\n.", "torch.half is not allowed"),
            (b"K\x01K\x02.", "STOP with 2 values"),
            (b"(K\x01.", "STOP with 1 MARK(s) still open (1 values"),
            (b"K\x01(.", "STOP with 1 MARK(s) still open (1 values"),
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
        p.extend(std::iter::repeat_n(0x85, 5000));
        p.push(b'.');
        let e = run(&p).unwrap_err();
        assert!(
            matches!(
                e.kind,
                PickleErrorKind::Limit {
                    what: "nesting depth",
                    ..
                }
            ),
            "{e}"
        );
        // A self-referencing list is fine to build (it is a reference).
        let p = run(b"]q\x00h\x00a.").unwrap();
        assert!(matches!(p.deref(p.root()), Some(Object::List(v)) if v.len() == 1));
    }

    #[test]
    fn exponential_memo_graph_is_cheap() {
        // t0 = (); t(i+1) = (t_i, t_i): 2^60 leaves, 60 objects.
        let mut p = b")q\x00".to_vec();
        for i in 0..60u8 {
            p.extend_from_slice(&[b'h', i, 0x86, b'q', i + 1]);
        }
        p.push(b'.');
        let pk = run(&p).unwrap();
        assert_eq!(pk.objects().len(), 61);
    }

    /// How a bomb applies `torch.Size` to its shared argument.
    #[derive(Clone, Copy, Debug)]
    enum Apply {
        Reduce,
        NewObj,
        Build,
    }

    /// What the shared argument is: a tuple of `n` Nones (the arguments
    /// themselves), or a list or dict of them passed as the one argument.
    #[derive(Clone, Copy, Debug)]
    enum Shared {
        Tuple,
        List,
        Dict,
    }

    /// A pickle that memoizes one container of `n` Nones, then applies
    /// `torch.Size` to it `calls` times, keeping every result in a list
    /// (whose first two items are the container and `torch.Size`: the
    /// opcodes torch accepts have no POP to drop them).
    fn bomb(apply: Apply, shared: Shared, n: usize, calls: usize) -> Vec<u8> {
        let mut p = vec![0x80, 2];
        p.extend_from_slice(b"]("); // the results
        match shared {
            Shared::Tuple => {
                p.push(b'(');
                p.extend(std::iter::repeat_n(b'N', n));
                p.push(b't');
            }
            Shared::List => {
                p.extend_from_slice(b"](");
                p.extend(std::iter::repeat_n(b'N', n));
                p.push(b'e');
            }
            Shared::Dict => {
                p.extend_from_slice(b"}(");
                p.extend(std::iter::repeat_n(b'N', 2 * n));
                p.push(b'u');
            }
        }
        p.extend_from_slice(b"q\x00"); // BINPUT 0
        p.extend_from_slice(b"ctorch\nSize\nq\x02"); // BINPUT 2
        for _ in 0..calls {
            p.extend_from_slice(b"h\x02"); // torch.Size
                                           // The argument tuple: the shared tuple itself, or (shared,).
            let args: &[u8] = match shared {
                Shared::Tuple => b"h\x00",
                _ => b"h\x00\x85",
            };
            match apply {
                Apply::Reduce => {
                    p.extend_from_slice(args);
                    p.push(b'R');
                }
                Apply::NewObj => {
                    p.extend_from_slice(args);
                    p.push(0x81);
                }
                Apply::Build => {
                    // torch.Size() with the shared object as its state.
                    p.extend_from_slice(b")Rh\x00b");
                }
            }
        }
        p.extend_from_slice(b"e.");
        p
    }

    #[test]
    fn calls_share_their_arguments() {
        // 200,000 Nones applied 2000 times would be 6.4 GB of copies;
        // shared, the calls cost the same few bytes each whatever the
        // argument's size. (The checkpoint tests run the full bomb.)
        const N: usize = 200_000;
        for apply in [Apply::Reduce, Apply::NewObj, Apply::Build] {
            for shared in [Shared::Tuple, Shared::List, Shared::Dict] {
                let few = run(&bomb(apply, shared, N, 10)).unwrap();
                let many = run(&bomb(apply, shared, N, 2000)).unwrap();
                let per_call = (many.bytes_held() - few.bytes_held()) / 1990;
                assert!(
                    per_call < 300,
                    "{apply:?} {shared:?}: {per_call} B per call"
                );
                // The container itself, once: a million slots of 16 or 32 B
                // (plus the stack that held them while it was built).
                let (slots, stacked) = match shared {
                    Shared::Dict => (32 * N, 2 * N),
                    _ => (16 * N, N),
                };
                let stack = 2 * stacked * size_of::<Slot>();
                assert!(
                    many.bytes_held() > slots && many.bytes_held() < slots + stack + (1 << 20),
                    "{apply:?} {shared:?}: {} B held",
                    many.bytes_held()
                );
                let Some(Object::List(results)) = many.deref(many.root()) else {
                    panic!("{apply:?} {shared:?}: the root is not the list of results");
                };
                assert_eq!(results.len(), 2002);
                let results = &results[2..];
                // Every call refers to the one shared container.
                let refs: Vec<Value> = results
                    .iter()
                    .map(|&r| match (apply, shared, many.deref(r)) {
                        (Apply::Build, _, Some(Object::Call { state, .. })) => state.unwrap(),
                        (_, Shared::Tuple, Some(Object::Call { args, .. })) => Value::Ref(*args),
                        _ => many.call(r).unwrap().1[0],
                    })
                    .collect();
                let first = match refs[0] {
                    Value::Ref(id) => many.get(id).unwrap(),
                    _ => panic!(),
                };
                assert!(
                    matches!(first, Object::Tuple(v) | Object::List(v) if v.len() == N)
                        || matches!(first, Object::Dict(d) if d.len() == N)
                );
                assert!(refs.iter().all(|&r| r == refs[0]), "{apply:?} {shared:?}");
            }
        }
    }

    #[test]
    fn the_byte_budget_is_counted_before_each_allocation() {
        let limits = Limits {
            max_bytes: 8 << 20,
            ..Limits::default()
        };
        // A million Nones on the stack need 24 MB of slots: refused when
        // the stack would grow past 8 MiB, with the bytes it would hold.
        let e =
            Pickle::parse(&bomb(Apply::Reduce, Shared::Tuple, 1_000_000, 1), &limits).unwrap_err();
        let PickleErrorKind::Budget {
            budget,
            limit,
            needed,
        } = e.kind
        else {
            panic!("{e}");
        };
        assert_eq!((budget, limit), ("max_bytes", 8 << 20));
        assert!(needed > limit && needed <= 2 * limit + 64, "{needed}");
        assert!(e.to_string().contains("max_bytes"), "{e}");

        // A long string is counted by its length: exactly at the budget it
        // is made; then the arena's first four object slots are one
        // allocation too many.
        let mut p = b"X\x00\x00\x10\x00".to_vec();
        p.extend(std::iter::repeat_n(b'a', 1 << 20));
        p.push(b'.');
        let small = Limits {
            max_bytes: 1 << 20,
            ..Limits::default()
        };
        let e = Pickle::parse(&p, &small).unwrap_err();
        assert_eq!(
            e.kind,
            PickleErrorKind::Budget {
                budget: "max_bytes",
                limit: 1 << 20,
                needed: ((1 << 20) + 4 * size_of::<Object>()) as u64,
            },
            "{e}"
        );
    }

    #[test]
    fn reduce_needs_a_tuple() {
        let e = run(b"ctorch\nSize\n]R.").unwrap_err();
        assert!(
            e.to_string()
                .contains("expected an argument tuple, found a list"),
            "{e}"
        );
        let p = run(b"ctorch\nSize\n(K\x02K\x03\x86tR.").unwrap();
        let (g, args) = p.call(p.root()).unwrap();
        assert_eq!(g, Global::Size);
        assert_eq!(p.as_seq(args[0]), Some(&[Value::Int(2), Value::Int(3)][..]));
    }

    #[test]
    fn opcodes_torch_refuses_are_refused_by_name_and_offset() {
        // The clone bomb drops its memoized tuple with POP (48):
        // torch says "Unsupported operand 48".
        let e = run(&bomb_with_pop()).unwrap_err();
        assert_eq!(
            e.kind,
            PickleErrorKind::Refused {
                opcode: "POP",
                code: b'0'
            }
        );
        assert_eq!(e.offset, 2 + 1 + 1000 + 1 + 2);
        assert!(e.to_string().contains("POP (0x30)"), "{e}");
        // Every opcode torch's unpickler lacks, after a valid prefix.
        let cases: &[(&[u8], &str)] = &[
            (b"N1", "POP_MARK"),
            (b"N2", "DUP"),
            (b"\x95\x00\x00\x00\x00\x00\x00\x00\x00", "FRAME"),
            (b"\x8c\x01a", "SHORT_BINUNICODE"),
            (b"\x8d", "BINUNICODE8"),
            (b"T\x01\x00\x00\x00a", "BINSTRING"),
            (b"C\x01a", "SHORT_BINBYTES"),
            (b"B", "BINBYTES"),
            (b"\x8e", "BINBYTES8"),
            (b"\x8b\x01\x00\x00\x00\x01", "LONG4"),
            (b"(l", "LIST"),
            (b"(d", "DICT"),
            (b"(\x91", "FROZENSET"),
            (b"\x8f(N\x90", "ADDITEMS"),
            (b"N\x94", "MEMOIZE"),
            (b"\x93", "STACK_GLOBAL"),
            (b"\x92", "NEWOBJ_EX"),
            (b"I1\n", "INT"),
            (b"S'a'\n", "STRING"),
        ];
        for (body, name) in cases {
            let mut p = b"\x80\x02".to_vec();
            p.extend_from_slice(body);
            p.push(b'.');
            let e = run(&p).unwrap_err();
            let PickleErrorKind::Refused { opcode, code } = e.kind else {
                panic!("{name}: {e}");
            };
            assert_eq!(opcode, *name);
            assert_eq!(
                e.offset,
                p.len() - 1 - body.len() + body.iter().position(|&b| b == code).unwrap()
            );
        }
    }

    /// A tuple of a thousand Nones, memoized and dropped with POP, then
    /// `torch.Size(*tuple)`: the shape of the clone bomb.
    fn bomb_with_pop() -> Vec<u8> {
        let mut p = b"\x80\x02(".to_vec();
        p.extend(std::iter::repeat_n(b'N', 1000));
        p.extend_from_slice(b"tq\x000ctorch\nSize\nh\x00R.");
        p
    }

    #[test]
    fn torchs_conditions_on_accepted_opcodes() {
        // APPEND and APPENDS only to a list, not to a set.
        let e = run(b"\x8fNa.").unwrap_err();
        assert!(
            e.to_string()
                .contains("APPEND: expected a list, found a set"),
            "{e}"
        );
        let e = run(b"\x8f(Ne.").unwrap_err();
        assert!(e.to_string().contains("APPENDS: expected a list"), "{e}");
        // A persistent id is an int or a tuple naming a storage.
        assert!(run(b"(X\x07\x00\x00\x00storageK\x01tQ.").is_ok());
        assert!(run(b"K\x01Q.").is_ok());
        for bad in [&b"(X\x04\x00\x00\x00evilK\x01tQ."[..], b"]Q.", b"NQ."] {
            let e = run(bad).unwrap_err();
            assert!(
                e.to_string()
                    .contains("BINPERSID: expected an int, or a tuple naming a storage"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_far_memo_id_costs_one_entry() {
        // LONG_BINPUT 11,000,000: a dense memo allocated 11 million slots
        // (264 MB); the map holds the one entry.
        let p = b"\x80\x02Nr\xc0\xd8\xa7\x00.";
        let held = run(p).unwrap().bytes_held();
        assert!(held < 1024, "{held} B held for one memo entry");
        // And the largest id, fetched back.
        let p = run(b"K\x07r\xff\xff\xff\xff0j\xff\xff\xff\xff.");
        assert!(p.is_err()); // POP is refused; without it:
        let p = run(b"]K\x07r\xff\xff\xff\xffaj\xff\xff\xff\xffa.").unwrap();
        assert_eq!(
            p.as_seq(p.root()),
            Some(&[Value::Int(7), Value::Int(7)][..])
        );
    }
}
