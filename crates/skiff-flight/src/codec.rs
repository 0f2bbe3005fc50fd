//! Physical plans as bytes. The coordinator plans; a worker decodes the
//! bytes against its own task context and runs them. Expressions are
//! deduplicated by identity, so a dynamic filter shared by a hash join and a
//! scan below it is still one filter after the trip.

use std::sync::Arc;

use datafusion::common::{Result, not_impl_err};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_proto_converter, physical_plan_to_bytes_with_proto_converter,
};
use datafusion_proto::physical_plan::{
    DeduplicatingProtoConverter, PhysicalExtensionCodec, PhysicalProtoConverterExtension,
};

/// Extension codec for Skiff's own plan nodes. Plans shipped whole (before
/// cutting) contain none; state separation adds the leaves that read
/// migrated state.
#[derive(Debug, Default)]
pub struct SkiffCodec;

impl PhysicalExtensionCodec for SkiffCodec {
    fn try_decode(
        &self,
        _buf: &[u8],
        _inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        not_impl_err!("this Skiff version knows no extension plan nodes")
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        _buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        not_impl_err!("plan node {} cannot be shipped to a worker", node.name())
    }
}

/// Serialize `plan` for a worker.
pub fn encode_plan(plan: Arc<dyn ExecutionPlan>) -> Result<bytes::Bytes> {
    physical_plan_to_bytes_with_proto_converter(plan, &SkiffCodec, &DeduplicatingProtoConverter {})
}

/// Rebuild a plan serialized by [`encode_plan`], resolving functions and
/// object stores against `ctx`.
pub fn decode_plan(bytes: &[u8], ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
    physical_plan_from_bytes_with_proto_converter(
        bytes,
        ctx,
        &SkiffCodec,
        &DeduplicatingProtoConverter {},
    )
}
