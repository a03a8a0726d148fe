//! Tunnel messages: konnectivity-client's `Packet` (see
//! `proto/konnectivity-client.proto` at the repository root), as prost
//! types with the same field numbers, and [`Frame`], the typed value the
//! tunnel's I/O code works with.
//!
//! gRPC's length-prefixed message framing (a flag byte, a 4-byte big-endian
//! length, the message) is here too: [`message_len`] finds where the next
//! message ends, [`decode_message`] decodes it without copying `Data`
//! bytes, [`Frame::to_message`] frames one. None of them panic; a packet
//! whose `type` and payload disagree is refused, so the I/O code never
//! inspects a raw packet.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;

/// The largest message either side accepts (gRPC's usual default).
pub const MAX_MESSAGE_LEN: usize = 4 * 1024 * 1024;

/// The gRPC length prefix.
pub const PREFIX_LEN: usize = 5;

/// `PacketType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum PacketType {
    /// Dial a destination.
    DialReq = 0,
    /// The dial's outcome.
    DialRsp = 1,
    /// Close a connection.
    CloseReq = 2,
    /// The close's outcome.
    CloseRsp = 3,
    /// Bytes of a connection.
    Data = 4,
    /// Abandon a dial in progress.
    DialCls = 5,
    /// The sender is draining: open no new connections through it.
    Drain = 6,
}

/// `Packet`: a type and the payload of that type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Packet {
    /// `PacketType`.
    #[prost(enumeration = "PacketType", tag = "1")]
    pub r#type: i32,
    /// The payload.
    #[prost(oneof = "Payload", tags = "2, 3, 4, 5, 6, 7, 8")]
    pub payload: Option<Payload>,
}

/// `Packet.payload`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Payload {
    /// `dialRequest`.
    #[prost(message, tag = "2")]
    DialRequest(DialRequest),
    /// `dialResponse`.
    #[prost(message, tag = "3")]
    DialResponse(DialResponse),
    /// `data`.
    #[prost(message, tag = "4")]
    Data(Data),
    /// `closeRequest`.
    #[prost(message, tag = "5")]
    CloseRequest(CloseRequest),
    /// `closeResponse`.
    #[prost(message, tag = "6")]
    CloseResponse(CloseResponse),
    /// `closeDial`.
    #[prost(message, tag = "7")]
    CloseDial(CloseDial),
    /// `drain`.
    #[prost(message, tag = "8")]
    Drain(Drain),
}

/// `DialRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DialRequest {
    /// `tcp`.
    #[prost(string, tag = "1")]
    pub protocol: String,
    /// `host:port`.
    #[prost(string, tag = "2")]
    pub address: String,
    /// Chosen by the dialer, echoed back.
    #[prost(int64, tag = "3")]
    pub random: i64,
}

/// `DialResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DialResponse {
    /// Empty on success.
    #[prost(string, tag = "1")]
    pub error: String,
    /// `connectID`.
    #[prost(int64, tag = "2")]
    pub connect_id: i64,
    /// The request's `random`.
    #[prost(int64, tag = "3")]
    pub random: i64,
}

/// `CloseRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CloseRequest {
    /// `connectID`.
    #[prost(int64, tag = "1")]
    pub connect_id: i64,
}

/// `CloseResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CloseResponse {
    /// Empty on success.
    #[prost(string, tag = "1")]
    pub error: String,
    /// `connectID`.
    #[prost(int64, tag = "2")]
    pub connect_id: i64,
}

/// `CloseDial`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CloseDial {
    /// The dial's `random`.
    #[prost(int64, tag = "1")]
    pub random: i64,
}

/// `Drain`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Drain {}

/// `Data`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Data {
    /// `connectID`.
    #[prost(int64, tag = "1")]
    pub connect_id: i64,
    /// Set when the sender's side failed.
    #[prost(string, tag = "2")]
    pub error: String,
    /// The bytes.
    #[prost(bytes = "bytes", tag = "3")]
    pub data: Bytes,
}

/// A packet whose type and payload agree.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// Dial `address` over `protocol`.
    Dial {
        /// `tcp`.
        protocol: String,
        /// `host:port`.
        address: String,
        /// Echoed in the response.
        random: i64,
    },
    /// The dial's outcome: the connection id, or why there is none.
    Dialed {
        /// `Ok(connectID)` or `Err(error)`.
        result: Result<i64, String>,
        /// The request's `random`.
        random: i64,
    },
    /// Bytes of connection `connect_id`; `error` set when its sender failed.
    Data {
        /// `connectID`.
        connect_id: i64,
        /// The bytes.
        data: Bytes,
        /// The sender's error, if any.
        error: Option<String>,
    },
    /// Close connection `connect_id`.
    Close {
        /// `connectID`.
        connect_id: i64,
    },
    /// The close's outcome.
    Closed {
        /// `connectID`.
        connect_id: i64,
        /// The error, if any.
        error: Option<String>,
    },
    /// Abandon the dial sent with `random`.
    CancelDial {
        /// The dial's `random`.
        random: i64,
    },
    /// The sender drains.
    Drain,
}

/// Why a packet is not a [`Frame`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Not protobuf, or not a `Packet`.
    #[error("not a tunnel packet: {0}")]
    Protobuf(String),
    /// A `type` this side does not know.
    #[error("unknown packet type {0}")]
    UnknownType(i32),
    /// The payload is missing or of another type.
    #[error("a {ty:?} packet carries {found}")]
    Mismatch {
        /// The packet's type.
        ty: PacketType,
        /// What it carried.
        found: &'static str,
    },
}

fn none_if_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// Why a gRPC message frame is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// The compressed flag is set; no compression is negotiated.
    #[error("a compressed message arrived, but no compression was negotiated")]
    Compressed,
    /// The flag byte is neither 0 nor 1.
    #[error("message flag {0:#04x} is not 0 or 1")]
    BadFlag(u8),
    /// The length is over the limit.
    #[error("a {len}-byte message is over the {max}-byte limit")]
    TooLong {
        /// The announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// The length (prefix included) of the gRPC message at the start of `buf`,
/// once its prefix is there; `Ok(None)` until then.
pub fn message_len(buf: &[u8], max: usize) -> Result<Option<usize>, FramingError> {
    let Some(prefix) = buf.get(..PREFIX_LEN) else {
        return Ok(None);
    };
    match prefix[0] {
        0 => {}
        1 => return Err(FramingError::Compressed),
        flag => return Err(FramingError::BadFlag(flag)),
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len > max {
        return Err(FramingError::TooLong { len, max });
    }
    Ok(Some(PREFIX_LEN + len))
}

/// Decodes one whole gRPC message (prefix included, as measured by
/// [`message_len`]); `Data` bytes share `message`'s memory.
pub fn decode_message(message: Bytes) -> Result<Frame, PacketError> {
    let body = message.slice(PREFIX_LEN.min(message.len())..);
    let packet = Packet::decode(body).map_err(|e| PacketError::Protobuf(e.to_string()))?;
    frame(packet)
}

/// Checks that `packet`'s type and payload agree.
pub fn frame(packet: Packet) -> Result<Frame, PacketError> {
    let ty =
        PacketType::try_from(packet.r#type).map_err(|_| PacketError::UnknownType(packet.r#type))?;
    let found = match &packet.payload {
        None => "no payload",
        Some(Payload::DialRequest(_)) => "a dialRequest",
        Some(Payload::DialResponse(_)) => "a dialResponse",
        Some(Payload::Data(_)) => "data",
        Some(Payload::CloseRequest(_)) => "a closeRequest",
        Some(Payload::CloseResponse(_)) => "a closeResponse",
        Some(Payload::CloseDial(_)) => "a closeDial",
        Some(Payload::Drain(_)) => "a drain",
    };
    Ok(match (ty, packet.payload) {
        (PacketType::DialReq, Some(Payload::DialRequest(d))) => Frame::Dial {
            protocol: d.protocol,
            address: d.address,
            random: d.random,
        },
        (PacketType::DialRsp, Some(Payload::DialResponse(d))) => Frame::Dialed {
            result: if d.error.is_empty() {
                Ok(d.connect_id)
            } else {
                Err(d.error)
            },
            random: d.random,
        },
        (PacketType::Data, Some(Payload::Data(d))) => Frame::Data {
            connect_id: d.connect_id,
            data: d.data,
            error: none_if_empty(d.error),
        },
        (PacketType::CloseReq, Some(Payload::CloseRequest(c))) => Frame::Close {
            connect_id: c.connect_id,
        },
        (PacketType::CloseRsp, Some(Payload::CloseResponse(c))) => Frame::Closed {
            connect_id: c.connect_id,
            error: none_if_empty(c.error),
        },
        (PacketType::DialCls, Some(Payload::CloseDial(c))) => {
            Frame::CancelDial { random: c.random }
        }
        // An empty message's field may be left out by an encoder.
        (PacketType::Drain, Some(Payload::Drain(_)) | None) => Frame::Drain,
        (ty, _) => return Err(PacketError::Mismatch { ty, found }),
    })
}

/// Decodes one protobuf-encoded `Packet` into a [`Frame`].
pub fn decode(bytes: &[u8]) -> Result<Frame, PacketError> {
    let packet = Packet::decode(bytes).map_err(|e| PacketError::Protobuf(e.to_string()))?;
    frame(packet)
}

impl Frame {
    /// The `Packet` that carries this frame.
    pub fn into_packet(self) -> Packet {
        let (ty, payload) = match self {
            Frame::Dial {
                protocol,
                address,
                random,
            } => (
                PacketType::DialReq,
                Payload::DialRequest(DialRequest {
                    protocol,
                    address,
                    random,
                }),
            ),
            Frame::Dialed { result, random } => {
                let (connect_id, error) = match result {
                    Ok(id) => (id, String::new()),
                    Err(e) => (0, e),
                };
                (
                    PacketType::DialRsp,
                    Payload::DialResponse(DialResponse {
                        error,
                        connect_id,
                        random,
                    }),
                )
            }
            Frame::Data {
                connect_id,
                data,
                error,
            } => (
                PacketType::Data,
                Payload::Data(Data {
                    connect_id,
                    error: error.unwrap_or_default(),
                    data,
                }),
            ),
            Frame::Close { connect_id } => (
                PacketType::CloseReq,
                Payload::CloseRequest(CloseRequest { connect_id }),
            ),
            Frame::Closed { connect_id, error } => (
                PacketType::CloseRsp,
                Payload::CloseResponse(CloseResponse {
                    error: error.unwrap_or_default(),
                    connect_id,
                }),
            ),
            Frame::CancelDial { random } => (
                PacketType::DialCls,
                Payload::CloseDial(CloseDial { random }),
            ),
            Frame::Drain => (PacketType::Drain, Payload::Drain(Drain {})),
        };
        Packet {
            r#type: ty as i32,
            payload: Some(payload),
        }
    }

    /// The protobuf encoding of [`into_packet`](Self::into_packet).
    pub fn encode(self) -> Vec<u8> {
        self.into_packet().encode_to_vec()
    }

    /// This frame as one gRPC message: prefix and protobuf.
    pub fn to_message(self) -> Bytes {
        let packet = self.into_packet();
        let len = packet.encoded_len();
        let mut out = BytesMut::with_capacity(PREFIX_LEN + len);
        out.put_u8(0);
        // A packet's length fits: the data written is at most a relay
        // buffer (16 MiB), and u32 holds 4 GiB.
        out.put_u32(len as u32);
        // Cannot fail: the buffer has the capacity the length asked for.
        let _ = packet.encode(&mut out);
        out.freeze()
    }
}

/// The gRPC message of a `DATA` frame for `connect_id` carrying `len`
/// bytes, without the bytes: prefix and protobuf up to the payload, so that
/// a sender writes this and then the payload as it is, with no copy. The
/// same bytes as [`Frame::to_message`] up to the payload.
pub fn data_message_header(connect_id: i64, len: usize) -> Bytes {
    use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
    // Data { connectID = 1 (omitted when 0, as prost does), data = 3 }.
    let id_len = if connect_id == 0 {
        0
    } else {
        1 + encoded_len_varint(connect_id as u64)
    };
    let data_len = if len == 0 {
        0
    } else {
        1 + encoded_len_varint(len as u64) + len
    };
    let inner = id_len + data_len;
    // Packet { type = 1 (DATA = 4), data = 4 (Data) }.
    let packet = 2 + 1 + encoded_len_varint(inner as u64) + inner;
    let mut out = BytesMut::with_capacity(PREFIX_LEN + 24);
    out.put_u8(0);
    // Fits: a payload is at most a relay buffer (16 MiB).
    out.put_u32(packet as u32);
    encode_key(1, WireType::Varint, &mut out);
    encode_varint(PacketType::Data as u64, &mut out);
    encode_key(4, WireType::LengthDelimited, &mut out);
    encode_varint(inner as u64, &mut out);
    if connect_id != 0 {
        encode_key(1, WireType::Varint, &mut out);
        encode_varint(connect_id as u64, &mut out);
    }
    if len != 0 {
        encode_key(3, WireType::LengthDelimited, &mut out);
        encode_varint(len as u64, &mut out);
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes written by hand from the proto's field numbers: a DIAL_REQ
    /// (type 0 is the default and not written) with dialRequest (field 2)
    /// { protocol (1) "tcp", address (2) "a:1", random (3) 7 }.
    #[test]
    fn decodes_the_field_numbers_of_the_proto() {
        let bytes = [
            0x12, 0x0c, 0x0a, 0x03, b't', b'c', b'p', 0x12, 0x03, b'a', b':', b'1', 0x18, 0x07,
        ];
        assert_eq!(
            decode(&bytes).unwrap(),
            Frame::Dial {
                protocol: "tcp".into(),
                address: "a:1".into(),
                random: 7
            }
        );
        // DATA (type 4) with data (field 4) { connectID (1) 3, data (3) "hi" }.
        let bytes = [0x08, 0x04, 0x22, 0x06, 0x08, 0x03, 0x1a, 0x02, b'h', b'i'];
        assert_eq!(
            decode(&bytes).unwrap(),
            Frame::Data {
                connect_id: 3,
                data: Bytes::from_static(b"hi"),
                error: None
            }
        );
    }

    #[test]
    fn frames_round_trip() {
        let frames = [
            Frame::Dial {
                protocol: "tcp".into(),
                address: "[fd00::1]:6443".into(),
                random: -1,
            },
            Frame::Dialed {
                result: Ok(42),
                random: 9,
            },
            Frame::Dialed {
                result: Err("destination not allowed".into()),
                random: 9,
            },
            Frame::Data {
                connect_id: 42,
                data: Bytes::from_static(b"GET / HTTP/1.1\r\n"),
                error: None,
            },
            Frame::Close { connect_id: 42 },
            Frame::Closed {
                connect_id: 42,
                error: Some("gone".into()),
            },
            Frame::CancelDial { random: 9 },
            Frame::Drain,
        ];
        for f in frames {
            assert_eq!(decode(&f.clone().encode()).unwrap(), f);
        }
    }

    #[test]
    fn a_data_header_and_its_payload_are_the_whole_message() {
        for (id, len) in [(1, 300), (0, 5), (42, 0), (i64::MAX, 70_000), (-1, 1)] {
            let data = Bytes::from(vec![9u8; len]);
            let whole = Frame::Data {
                connect_id: id,
                data: data.clone(),
                error: None,
            }
            .to_message();
            let mut joined = data_message_header(id, len).to_vec();
            joined.extend_from_slice(&data);
            assert_eq!(joined, whole.to_vec(), "connect id {id}, {len} bytes");
        }
    }

    #[test]
    fn grpc_messages_are_framed_and_measured() {
        let f = Frame::Data {
            connect_id: 1,
            data: Bytes::from(vec![7u8; 300]),
            error: None,
        };
        let m = f.clone().to_message();
        assert_eq!(message_len(&m[..4], MAX_MESSAGE_LEN), Ok(None));
        assert_eq!(message_len(&m, MAX_MESSAGE_LEN), Ok(Some(m.len())));
        assert_eq!(decode_message(m.clone()).unwrap(), f);
        assert_eq!(
            message_len(&m, 10),
            Err(FramingError::TooLong {
                len: m.len() - PREFIX_LEN,
                max: 10
            })
        );
        assert_eq!(
            message_len(&[1, 0, 0, 0, 0], 10),
            Err(FramingError::Compressed)
        );
        assert_eq!(
            message_len(&[9, 0, 0, 0, 0], 10),
            Err(FramingError::BadFlag(9))
        );
    }

    #[test]
    fn a_type_and_payload_that_disagree_are_refused() {
        let p = Packet {
            r#type: PacketType::Data as i32,
            payload: Some(Payload::CloseDial(CloseDial { random: 1 })),
        };
        assert_eq!(
            frame(p).unwrap_err().to_string(),
            "a Data packet carries a closeDial"
        );
        let p = Packet {
            r#type: 99,
            payload: None,
        };
        assert_eq!(frame(p).unwrap_err(), PacketError::UnknownType(99));
        assert!(matches!(
            decode(&[0x12, 0xff]),
            Err(PacketError::Protobuf(_))
        ));
        // A DIAL_REQ with nothing in it (the empty message) is refused.
        assert!(matches!(decode(&[]), Err(PacketError::Mismatch { .. })));
    }
}
