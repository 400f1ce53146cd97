//! The Diameter core, sans-IO (RFC 6733): AVPs, messages, the codec and TCP framer,
//! the dictionary, request validation and the answer builder.
//!
//! Two error families: [`FramingError`] (close the connection) and [`ProtocolError`]
//! (answer with a Result-Code). Nothing here touches a socket or a clock.
//!
//! Typical receive path:
//!
//! ```
//! use dra::diameter::{Dictionary, Framer, decode, validate_request};
//! # let bytes: &[u8] = &[];
//! let mut framer = Framer::new();
//! framer.push(bytes);
//! while let Some(frame) = framer.next_message().expect("framing error: close") {
//!     match decode(&frame) {
//!         Ok(msg) => {
//!             if let Err(e) = validate_request(&msg, Dictionary::standard(), &[4]) {
//!                 let _answer = e.answer(&msg, "dra.example.net", "example.net");
//!             }
//!         }
//!         Err(e) => {
//!             let pe = e.to_protocol_error(Dictionary::standard());
//!             if let (Some(req), Some(pe)) = (e.partial(), pe) {
//!                 let _answer = pe.answer(req, "dra.example.net", "example.net");
//!             }
//!         }
//!     }
//! }
//! ```

pub mod avp;
pub mod codec;
pub mod dictionary;
pub mod error;
pub mod message;
pub mod peer;
pub mod raw;
pub mod result_code;
pub mod validate;

pub use avp::Avp;
pub use codec::{DEFAULT_MAX_MESSAGE_SIZE, Framer, decode, encode, encode_into, try_encode};
pub use dictionary::{
    AvpDef, CommandDef, DataType, Dictionary, FlagRule, avp_code, command_code, vendor,
};
pub use error::{
    AvpDataError, DecodeError, EncodeError, FramingError, OffendingAvp, ProtocolError,
};
pub use message::{Message, answer_for};
pub use validate::validate_request;
