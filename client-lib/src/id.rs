//! [`Id`]: the identifiers the broker mints (runs, runtimes, capabilities,
//! leases, approvals, approver keys), as the wire types carry them.
//!
//! Why a type: every one of them is a lowercase canonical UUID, and the
//! OpenAPI document says so. Written as `String` fields, that schema was
//! repeated on each field (thirty times) and a new field could forget it;
//! here it is stated once, by [`Id`]'s schema (component `Id`), and every id
//! field names the type. On the wire nothing changes: an [`Id`] is its text
//! (`#[serde(transparent)]`), and it is not checked on the way in, so the
//! broker answers a malformed id exactly as it did when the field was a
//! string (a 404, or the field's own error).

use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

/// An identifier the broker minted: a lowercase canonical UUID such as
/// `0190b1a2-7c3d-7e4f-8a5b-6c7d8e9f0a1b`, as text.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Id(String);

impl Id {
    /// The pattern of an id the broker minted (the OpenAPI schema's `pattern`).
    pub const PATTERN: &'static str =
        "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

    /// The id with this text (not checked: see the module documentation).
    pub fn new(text: impl Into<String>) -> Self {
        Id(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// As its text: `"0190b1a2-…"`, the way the field printed when it was a string.
impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl Deref for Id {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Id {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Id {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<String> for Id {
    fn from(text: String) -> Self {
        Id(text)
    }
}

impl From<&str> for Id {
    fn from(text: &str) -> Self {
        Id(text.to_owned())
    }
}

impl From<&String> for Id {
    fn from(text: &String) -> Self {
        Id(text.clone())
    }
}

impl From<Id> for String {
    fn from(id: Id) -> String {
        id.0
    }
}

impl std::str::FromStr for Id {
    type Err = std::convert::Infallible;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Id::from(text))
    }
}

impl PartialEq<str> for Id {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Id {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for Id {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<Id> for str {
    fn eq(&self, other: &Id) -> bool {
        self == other.0
    }
}

impl PartialEq<Id> for &str {
    fn eq(&self, other: &Id) -> bool {
        *self == other.0
    }
}

impl PartialEq<Id> for String {
    fn eq(&self, other: &Id) -> bool {
        *self == other.0
    }
}

#[cfg(feature = "openapi")]
mod schema {
    use super::Id;
    use std::borrow::Cow;
    use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaFormat, Type};
    use utoipa::openapi::RefOr;
    use utoipa::{PartialSchema, ToSchema};

    /// `{"type": "string", "format": "uuid", "pattern": …}`: what each id
    /// field used to say for itself.
    impl PartialSchema for Id {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::Custom("uuid".to_owned())))
                .pattern(Some(Id::PATTERN))
                .into()
        }
    }

    impl ToSchema for Id {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("Id")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_the_wire_an_id_is_its_text() {
        let text = "0190b1a2-7c3d-7e4f-8a5b-6c7d8e9f0a1b";
        let id = Id::from(text);
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{text}\""));
        assert_eq!(
            serde_json::from_str::<Id>(&format!("\"{text}\"")).unwrap(),
            id
        );
        // Not checked on the way in: the broker decides what a bad id means.
        assert_eq!(serde_json::from_str::<Id>("\"nope\"").unwrap(), "nope");
        assert!(serde_json::from_str::<Id>("7").is_err());
        assert_eq!(format!("{id:?}"), format!("{text:?}"));
        assert_eq!(id.to_string(), text);
        assert_eq!(String::from(id.clone()), text);
        assert_eq!(id.as_str(), text);
        assert_eq!(id, text);
        assert_eq!(text, id);
        assert_eq!(id, String::from(text));
        assert_eq!(String::from(text), id);
    }
}
