//! What a handler reads and writes through: values loaded with their types and expiry times
//! (a key past its time deleted through the store as it is read), counted lookups, saves.

use super::*;

impl<'a> Ctx<'a> {
    pub fn new(
        store: &'a mut dyn Backend,
        session: &'a mut Session,
        counters: &'a mut Counters,
        out: &'a mut Vec<u8>,
        info: &'a dyn Fn() -> String,
        db: &'a mut Db,
        now_us: i64,
    ) -> Self {
        Ctx { store, session, counters, out, info, db, now_us, close: false, long: None }
    }

    /// The command's unix time in milliseconds.
    pub(super) fn now_ms(&self) -> i64 {
        self.now_us.div_euclid(1000)
    }

    /// The value stored at `key` and its expiry time, not counted in the keyspace statistics.
    /// A key whose time has come is deleted here, through the store (lazy expiry), and reads
    /// as missing.
    pub(super) fn fetch(&mut self, key: &[u8]) -> Result<Option<Timed<Value>>, ReplyError> {
        let Some(raw) = self.store.get(key).map_err(ReplyError::from)? else { return Ok(None) };
        let (v, ttl) = Value::decode_owned(raw)?;
        if let Some(t) = ttl {
            if t <= self.now_ms() {
                self.expire_now(key)?;
                return Ok(None);
            }
            // A key the start's walk has not reached yet joins the index when read.
            self.db.expiries.set(key, Some(t));
        }
        Ok(Some((v, ttl)))
    }

    /// Delete `key`, whose expiry time has passed.
    pub(super) fn expire_now(&mut self, key: &[u8]) -> Result<(), ReplyError> {
        // The index follows the store: a delete the store refused leaves the key's time known.
        if self.store.del(key).map_err(ReplyError::from)? {
            self.counters.expired_keys += 1;
        }
        self.db.expiries.set(key, None);
        Ok(())
    }

    /// Delete `key` (DEL and what empties or replaces a key); true if it was there.
    pub(super) fn remove(&mut self, key: &[u8]) -> Result<bool, ReplyError> {
        // The index follows the store: a delete the store refused leaves the key's time known.
        let there = self.store.del(key)?;
        self.db.expiries.set(key, None);
        Ok(there)
    }

    /// Whether `key` is there with its time passed (from the index; before the start's walk
    /// is done, a key the index does not know is read).
    pub(super) fn expired(&mut self, key: &[u8]) -> Result<bool, ReplyError> {
        let now = self.now_ms();
        if let Some(t) = self.db.expiries.get(key) {
            return Ok(t <= now);
        }
        if self.db.expiries.walked() {
            return Ok(false);
        }
        Ok(match self.store.get(key).map_err(ReplyError::from)? {
            Some(raw) => header(&raw)?.1.is_some_and(|t| t <= now),
            None => false,
        })
    }

    /// Whether `key` is there (EXISTS); a key past its time is expired here.
    pub(super) fn alive(&mut self, key: &[u8]) -> Result<bool, ReplyError> {
        if self.expired(key)? {
            self.expire_now(key)?;
            return Ok(false);
        }
        self.store.exists(key).map_err(ReplyError::from)
    }

    /// [`Ctx::fetch`], counted as a keyspace hit or miss.
    pub(super) fn load(&mut self, key: &[u8]) -> Result<Option<Timed<Value>>, ReplyError> {
        let v = self.fetch(key)?;
        if v.is_some() {
            self.counters.keyspace_hits += 1;
        } else {
            self.counters.keyspace_misses += 1;
        }
        Ok(v)
    }

    /// The string at `key`; WRONGTYPE for another type.
    pub(super) fn lookup(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, ReplyError> {
        Ok(self.lookup_ttl(key)?.map(|(s, _)| s))
    }

    /// The string at `key` and its expiry time; WRONGTYPE for another type.
    pub(super) fn lookup_ttl(&mut self, key: &[u8]) -> Result<Option<Timed<Vec<u8>>>, ReplyError> {
        match self.load(key)? {
            None => Ok(None),
            Some((Value::Str(s), ttl)) => Ok(Some((s, ttl))),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    /// The hash at `key` (empty if there is none); WRONGTYPE for another type.
    pub(super) fn hash(&mut self, key: &[u8]) -> Result<Fields, ReplyError> {
        Ok(self.hash_ttl(key)?.0)
    }

    /// The hash at `key` and its expiry time.
    pub(super) fn hash_ttl(&mut self, key: &[u8]) -> Result<(Fields, Option<i64>), ReplyError> {
        match self.load(key)? {
            None => Ok((vec![], None)),
            Some((Value::Hash(h), ttl)) => Ok((h, ttl)),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    /// The sorted set at `key` (empty if there is none); WRONGTYPE for another type.
    pub(super) fn zset(&mut self, key: &[u8]) -> Result<Scored, ReplyError> {
        Ok(self.zset_ttl(key)?.0)
    }

    /// The sorted set at `key` and its expiry time.
    pub(super) fn zset_ttl(&mut self, key: &[u8]) -> Result<(Scored, Option<i64>), ReplyError> {
        match self.load(key)? {
            None => Ok((vec![], None)),
            Some((Value::Zset(z), ttl)) => Ok((z, ttl)),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    /// After HDEL/ZREM took `removed` elements out of `v`: write it back (its expiry time
    /// kept), or delete the key when nothing is left (Redis has no empty hashes or sorted
    /// sets); reply the count.
    pub(super) fn shrunk(&mut self, key: &[u8], removed: usize, empty: bool, v: Value, ttl: Option<i64>) -> Result<(), ReplyError> {
        if removed > 0 {
            if empty {
                self.remove(key)?;
            } else {
                self.save(key, &v, ttl)?;
            }
        }
        reply::int(self.out, removed as i64);
        Ok(())
    }

    /// Store a string with no expiry time (SET, MSET, GETSET: a new value drops the old time).
    pub(super) fn store_value(&mut self, key: &[u8], value: &[u8]) -> Result<(), ReplyError> {
        self.save(key, &Value::Str(value.to_vec()), None)
    }

    /// Store `v` at `key`, expiring at `ttl` (unix ms) or never; the index follows.
    pub(super) fn save(&mut self, key: &[u8], v: &Value, ttl: Option<i64>) -> Result<(), ReplyError> {
        let bytes = v.encode(ttl);
        let max = self.store.max_value_bytes();
        if bytes.len() > max {
            return Err(too_big(bytes.len(), max, header_len(ttl)));
        }
        self.store.set(key, &bytes).map_err(ReplyError::from)?;
        self.db.expiries.set(key, ttl);
        Ok(())
    }
}
