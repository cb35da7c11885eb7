//! Reads composed of the conditions a query sets (the history, the job list,
//! the change log). A condition written `(? IS NULL OR column = ?)` keeps a
//! generic plan (the one every PostgreSQL connection uses) from any index:
//! every page read the whole table. Each filter that is set adds its own
//! condition instead; the driver keeps a prepared statement per text.

use super::{AnyQuery, SqlStore};

/// A value bound to a composed statement.
pub(super) enum Bind {
    Int(i64),
    Text(String),
}

impl From<i64> for Bind {
    fn from(v: i64) -> Bind {
        Bind::Int(v)
    }
}

impl From<String> for Bind {
    fn from(v: String) -> Bind {
        Bind::Text(v)
    }
}

impl From<&str> for Bind {
    fn from(v: &str) -> Bind {
        Bind::Text(v.to_owned())
    }
}

/// A `SELECT ... WHERE scheduler = ?` and the conditions added to it.
pub(super) struct Filtered {
    text: String,
    binds: Vec<Bind>,
}

impl Filtered {
    /// `select` (up to its `FROM`), for the store's own scheduler.
    pub(super) fn new(select: &str, scheduler: &str) -> Filtered {
        Filtered {
            text: format!("{select} WHERE scheduler = ?"),
            binds: vec![Bind::from(scheduler)],
        }
    }

    /// `AND condition` (no `?`) when `on`; nothing otherwise.
    pub(super) fn and_if(&mut self, condition: &str, on: bool) -> &mut Filtered {
        if on {
            self.text.push_str(" AND ");
            self.text.push_str(condition);
        }
        self
    }

    /// `AND condition` (one `?`) when `value` is set; nothing otherwise.
    pub(super) fn and(&mut self, condition: &str, value: Option<impl Into<Bind>>) -> &mut Filtered {
        let on = value.is_some();
        if let Some(value) = value {
            self.binds.push(value.into());
        }
        self.and_if(condition, on)
    }

    /// The statement, ending with `order` and `LIMIT limit`.
    pub(super) fn query(mut self, store: &SqlStore, order: &str, limit: u32) -> AnyQuery {
        self.text.push(' ');
        self.text.push_str(order);
        self.text.push_str(" LIMIT ?");
        self.binds.push(Bind::Int(i64::from(limit)));
        let mut q = sqlx::query(store.db.sql_composed(&self.text));
        for bind in self.binds {
            q = match bind {
                Bind::Int(v) => q.bind(v),
                Bind::Text(v) => q.bind(v),
            };
        }
        q
    }
}
