use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// How the bytes of a [`Payload`] are encoded.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Encoding {
    /// postcard (<https://postcard.jamesmunns.com>): compact, schema-less; what Rust guests use
    /// between themselves.
    Postcard,
    /// UTF-8 JSON text: what the CLI passes in and prints out.
    Json,
    /// Opaque bytes that neither side interprets.
    Bytes,
}

impl Encoding {
    /// The lower-case name used in messages and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Postcard => "postcard",
            Encoding::Json => "json",
            Encoding::Bytes => "bytes",
        }
    }
}

/// How many bytes a [`Payload`] holds without a heap allocation: most messages, results and
/// inputs between processes (a number, a pid, a small struct in postcard) fit, and then
/// sending one allocates nothing.
pub const INLINE_BYTES: usize = 16;

/// The bytes of a [`Payload`]: up to [`INLINE_BYTES`] in place, more on the heap. Dereferences to
/// `[u8]`; `into_vec` gives a `Vec<u8>`.
pub type PayloadBytes = smallvec::SmallVec<[u8; INLINE_BYTES]>;

/// A value crossing the host/guest boundary: bytes plus the encoding they are in.
///
/// The receiver decodes with [`Payload::decode`], whichever encoding the sender chose, so a CLI can
/// pass JSON to a guest that answers callers in postcard and the other way round.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Payload {
    /// How `bytes` is encoded.
    pub encoding: Encoding,
    /// The encoded value.
    #[serde(with = "inline_bytes")]
    pub bytes: PayloadBytes,
}

/// [`PayloadBytes`] on the wire as serde bytes, exactly as a `Vec<u8>` under `serde_bytes` (the
/// encoding the contract has always had), without a heap allocation for a small payload.
mod inline_bytes {
    use alloc::string::String;
    use alloc::vec::Vec;
    use core::fmt;

    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    use super::PayloadBytes;

    pub(super) fn serialize<S: Serializer>(bytes: &PayloadBytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PayloadBytes, D::Error> {
        d.deserialize_byte_buf(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = PayloadBytes;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte array")
        }

        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<PayloadBytes, E> {
            Ok(PayloadBytes::from_slice(v))
        }

        fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<PayloadBytes, E> {
            Ok(PayloadBytes::from_vec(v))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<PayloadBytes, E> {
            Ok(PayloadBytes::from_slice(v.as_bytes()))
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<PayloadBytes, E> {
            Ok(PayloadBytes::from_vec(v.into_bytes()))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PayloadBytes, A::Error> {
            // The hint is the sender's word: trusted only up to a small bound.
            let mut bytes = PayloadBytes::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(byte) = seq.next_element()? {
                bytes.push(byte);
            }
            Ok(bytes)
        }
    }
}

/// Why a value could not be encoded into or decoded from a [`Payload`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The JSON text did not hold a value of the expected type.
    #[error("invalid JSON payload: {0}")]
    Json(String),
    /// The postcard bytes did not hold a value of the expected type.
    #[error("invalid postcard payload: {0}")]
    Postcard(String),
    /// Opaque bytes only decode into byte containers.
    #[error("an opaque bytes payload cannot be decoded into a typed value")]
    Opaque,
}

impl Payload {
    /// The unit value `()` in postcard: zero bytes. Also what "no data" means in an event.
    pub const fn empty() -> Payload {
        Payload {
            encoding: Encoding::Postcard,
            bytes: PayloadBytes::new_const(),
        }
    }

    /// Wraps bytes that are already JSON text. Nothing is validated here; decoding checks.
    pub fn json_bytes(bytes: Vec<u8>) -> Payload {
        Payload {
            encoding: Encoding::Json,
            bytes: PayloadBytes::from_vec(bytes),
        }
    }

    /// Wraps bytes that are already postcard-encoded.
    pub fn postcard_bytes(bytes: Vec<u8>) -> Payload {
        Payload {
            encoding: Encoding::Postcard,
            bytes: PayloadBytes::from_vec(bytes),
        }
    }

    /// Wraps opaque bytes.
    pub fn opaque(bytes: Vec<u8>) -> Payload {
        Payload {
            encoding: Encoding::Bytes,
            bytes: PayloadBytes::from_vec(bytes),
        }
    }

    /// Encodes `value` as JSON.
    pub fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<Payload, PayloadError> {
        serde_json::to_vec(value)
            .map(Payload::json_bytes)
            .map_err(|e| PayloadError::Json(e.to_string()))
    }

    /// Encodes `value` as postcard.
    pub fn to_postcard<T: Serialize + ?Sized>(value: &T) -> Result<Payload, PayloadError> {
        postcard::to_extend(value, PayloadBytes::new())
            .map(|bytes| Payload {
                encoding: Encoding::Postcard,
                bytes,
            })
            .map_err(|e| PayloadError::Postcard(e.to_string()))
    }

    /// Encodes `value` in `encoding`; [`Encoding::Bytes`] is treated as postcard, since opaque
    /// bytes cannot carry a typed value.
    pub fn encode<T: Serialize + ?Sized>(
        encoding: Encoding,
        value: &T,
    ) -> Result<Payload, PayloadError> {
        match encoding {
            Encoding::Json => Payload::to_json(value),
            Encoding::Postcard | Encoding::Bytes => Payload::to_postcard(value),
        }
    }

    /// Decodes the value, whichever encoding it is in.
    ///
    /// An empty postcard payload decodes as `()` (and as any type whose postcard form is empty).
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, PayloadError> {
        match self.encoding {
            Encoding::Json => {
                serde_json::from_slice(&self.bytes).map_err(|e| PayloadError::Json(e.to_string()))
            }
            Encoding::Postcard => {
                postcard::from_bytes(&self.bytes).map_err(|e| PayloadError::Postcard(e.to_string()))
            }
            Encoding::Bytes => Err(PayloadError::Opaque),
        }
    }

    /// True when there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl Default for Payload {
    fn default() -> Self {
        Payload::empty()
    }
}

impl core::fmt::Debug for Payload {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.encoding {
            Encoding::Json => match core::str::from_utf8(&self.bytes) {
                Ok(text) => write!(f, "json:{text}"),
                Err(_) => write!(f, "json:<{} bytes, not UTF-8>", self.bytes.len()),
            },
            Encoding::Postcard => write!(f, "postcard:{:02x?}", self.bytes),
            Encoding::Bytes => write!(f, "bytes:{:02x?}", self.bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    #[test]
    fn json_and_postcard_round_trip_the_same_value() {
        let value = (7u32, "seven".to_string(), vec![1u8, 2]);
        for encoding in [Encoding::Json, Encoding::Postcard] {
            let payload = Payload::encode(encoding, &value).unwrap();
            assert_eq!(payload.encoding, encoding);
            assert_eq!(payload.decode::<(u32, String, Vec<u8>)>().unwrap(), value);
        }
    }

    #[test]
    fn empty_payload_is_unit() {
        Payload::empty().decode::<()>().unwrap();
        assert_eq!(Payload::to_postcard(&()).unwrap(), Payload::empty());
    }

    #[test]
    fn wrong_type_is_an_error_that_names_the_encoding() {
        let err = Payload::json_bytes(b"\"text\"".to_vec())
            .decode::<u32>()
            .unwrap_err();
        assert!(matches!(err, PayloadError::Json(_)), "{err:?}");
        assert!(err.to_string().starts_with("invalid JSON payload"));
        assert_eq!(
            Payload::opaque(vec![1]).decode::<u32>(),
            Err(PayloadError::Opaque)
        );
    }
}
