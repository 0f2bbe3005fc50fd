// SPDX-License-Identifier: Apache-2.0

//! Parsing of [crate::proto::extensions] types.

mod simple_extension_urn;
pub use simple_extension_urn::SimpleExtensionUrn;
