//! OpenAPI schemas the derives cannot say (feature `openapi`): a duration
//! string, and the `ErrorCode` enum with every code's meaning.
//!
//! Why here: the broker builds its OpenAPI document from the wire types of this
//! crate; these two are facts of the wire contract too (the duration grammar
//! and the list of codes), so they are written next to the types that use
//! them, not in the broker.

use crate::error_code::ErrorCode;
use std::borrow::Cow;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// The schema of a duration (`90s`, `5m`, `1h30m`); the fields that hold one
/// are strings.
pub struct DurationSchema;

impl PartialSchema for DurationSchema {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(2))
            .max_length(Some(32))
            .pattern(Some("^([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?$"))
            .description(Some(
                "Duration: one or more `<digits><unit>` groups, units `d`, `h`, `m`, `s` in \
                 that order, each at most once, no spaces; total > 0 and at most 366 days; at \
                 most 32 bytes. Examples: `90s`, `5m`, `1h30m`. Malformed values are \
                 `400 invalid_ttl` (`invalid_hold` for a hold).",
            ))
            .examples(["5m", "1h30m"])
            .into()
    }
}

impl ToSchema for DurationSchema {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Duration")
    }
}

impl PartialSchema for ErrorCode {
    fn schema() -> RefOr<Schema> {
        let mut description = String::from(
            "Every stable, machine-readable error code the broker returns, with its HTTP \
             status and meaning:\n",
        );
        for code in ErrorCode::ALL {
            let meaning = code.meaning().trim().replace('\n', " ");
            description.push_str(&format!("\n- `{}` {meaning}", code.as_str()));
        }
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(description))
            .enum_values(Some(ErrorCode::ALL.iter().map(|c| c.as_str())))
            .into()
    }
}

impl ToSchema for ErrorCode {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ErrorCode")
    }
}
