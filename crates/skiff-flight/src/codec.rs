//! Physical plans as bytes. The coordinator plans; a worker decodes the
//! bytes against its own task context and runs them. Expressions are
//! deduplicated by identity, so a dynamic filter shared by a hash join and a
//! scan below it is still one filter after the trip.

use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::common::{Result, ScalarValue, Statistics, internal_datafusion_err, not_impl_err};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{
    AcrossPartitions, ConstExpr, EquivalenceProperties, LexOrdering, PhysicalExpr,
};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{ExecutionPlan, PlanProperties};
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_proto_converter, physical_plan_to_bytes_with_proto_converter,
};
use datafusion_proto::physical_plan::from_proto::{
    parse_physical_sort_exprs, parse_protobuf_partitioning,
};
use datafusion_proto::physical_plan::to_proto::{
    serialize_partitioning, serialize_physical_sort_exprs,
};
use datafusion_proto::physical_plan::{
    DeduplicatingProtoConverter, PhysicalExtensionCodec, PhysicalPlanDecodeContext,
    PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf;
use prost::Message;
use skiff_engine::PipelineId;
use skiff_engine::materialized::{MaterializedExec, Source};
use skiff_engine::morsel::MorselGateExec;
use skiff_engine::offload::{Fragment, OffloadExec};

/// Extension codec for Skiff's own plan nodes. Plans shipped whole (before
/// splitting) contain only [`OffloadExec`]s (fragments a memory node may
/// run); state separation adds migrated [`MaterializedExec`] leaves, which
/// read migrated state, and the rest of a pipeline cut in the middle reads
/// its input through a [`MorselGateExec`] that skips what the source
/// consumed. A leaf is told by having no input; the two with one input by
/// a flag only an [`OffloadNode`] sets.
#[derive(Debug, Default)]
pub struct SkiffCodec;

/// A migrated [`MaterializedExec`] on the wire: what the leaf needs to stand where
/// the replaced subtree stood. Statistics are not shipped (unknown on
/// arrival); nothing is re-planned after a migration, so nothing reads them.
#[derive(Clone, PartialEq, Message)]
struct MigratedStateNode {
    /// The producing pipeline's id in the source execution.
    #[prost(uint64, tag = "1")]
    pipeline: u64,
    #[prost(message, optional, tag = "2")]
    schema: Option<protobuf::Schema>,
    #[prost(message, optional, tag = "3")]
    partitioning: Option<protobuf::Partitioning>,
    /// The output ordering, empty when unordered.
    #[prost(message, repeated, tag = "4")]
    ordering: Vec<protobuf::PhysicalSortExprNode>,
    /// Expressions known constant (a filter fixed them below the cut); an
    /// operator above may have been planned for them (an ordered aggregate).
    #[prost(message, repeated, tag = "5")]
    constants: Vec<ConstantNode>,
    /// Classes of expressions known equal (join keys below the cut).
    #[prost(message, repeated, tag = "6")]
    equivalences: Vec<EquivalenceClassNode>,
}

/// A [`MorselGateExec`] on the wire (its only child travels as the
/// node's input): the rows a cut pipeline's rest skips, per partition. Its
/// place in an execution's cut points is the receiver's to assign.
#[derive(Clone, PartialEq, Message)]
struct MorselGateNode {
    #[prost(uint64, repeated, tag = "1")]
    skip: Vec<u64>,
}

/// An [`OffloadExec`] on the wire (its child, the fragment planned to run
/// on the worker, travels as the node's input).
#[derive(Clone, PartialEq, Message)]
struct OffloadNode {
    /// The Substrait plan.
    #[prost(bytes = "vec", tag = "1")]
    plan: Vec<u8>,
    /// The columns the fragment reads, an Arrow IPC schema message.
    #[prost(bytes = "vec", tag = "2")]
    input_schema: Vec<u8>,
    /// Always true: tells this node from a [`MorselGateNode`], the other
    /// node with one input.
    #[prost(bool, tag = "15")]
    offload: bool,
}

#[derive(Clone, PartialEq, Message)]
struct ConstantNode {
    #[prost(message, optional, tag = "1")]
    expr: Option<protobuf::PhysicalExprNode>,
    /// The same value in every partition.
    #[prost(bool, tag = "2")]
    uniform: bool,
    /// The value, when uniform and known.
    #[prost(message, optional, tag = "3")]
    value: Option<protobuf::ScalarValue>,
}

#[derive(Clone, PartialEq, Message)]
struct EquivalenceClassNode {
    #[prost(message, repeated, tag = "1")]
    exprs: Vec<protobuf::PhysicalExprNode>,
}

impl PhysicalExtensionCodec for SkiffCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match inputs {
            [] => {}
            [input] => {
                if let Ok(node) = OffloadNode::decode(buf)
                    && node.offload
                {
                    let input_schema = crate::state_cache::decode_schema(&node.input_schema)
                        .map_err(|e| internal_datafusion_err!("bad OffloadExec node: {e}"))?;
                    let fragment = Fragment {
                        plan: node.plan,
                        input_schema,
                    };
                    return Ok(Arc::new(OffloadExec::new(
                        Arc::new(fragment),
                        Arc::clone(input),
                    )));
                }
                let node = MorselGateNode::decode(buf)
                    .map_err(|e| internal_datafusion_err!("bad MorselGateExec node: {e}"))?;
                return Ok(Arc::new(MorselGateExec::new(Arc::clone(input), node.skip)));
            }
            _ => return not_impl_err!("Skiff plan node with {} inputs", inputs.len()),
        }
        let node = MigratedStateNode::decode(buf)
            .map_err(|e| internal_datafusion_err!("bad migrated MaterializedExec node: {e}"))?;
        let Some(schema) = &node.schema else {
            return not_impl_err!("migrated MaterializedExec node without a schema");
        };
        let schema = Arc::new(Schema::try_from(schema)?);
        let decode_ctx = PhysicalPlanDecodeContext::new(ctx, self);
        let partitioning = parse_protobuf_partitioning(
            node.partitioning.as_ref(),
            &decode_ctx,
            &schema,
            proto_converter,
        )?
        .ok_or_else(|| {
            internal_datafusion_err!("migrated MaterializedExec node without partitioning")
        })?;
        let ordering =
            parse_physical_sort_exprs(&node.ordering, &decode_ctx, &schema, proto_converter)?;
        let orderings = LexOrdering::new(ordering).into_iter();
        let mut equivalences =
            EquivalenceProperties::new_with_orderings(Arc::clone(&schema), orderings);
        let decode_expr = |expr: Option<&protobuf::PhysicalExprNode>| match expr {
            Some(expr) => proto_converter.proto_to_physical_expr(expr, &schema, &decode_ctx),
            None => not_impl_err!("migrated MaterializedExec node with an empty expression"),
        };
        for class in &node.equivalences {
            let mut exprs = class.exprs.iter().map(|e| decode_expr(Some(e)));
            if let Some(first) = exprs.next() {
                let first = first?;
                for other in exprs {
                    equivalences.add_equal_conditions(Arc::clone(&first), other?)?;
                }
            }
        }
        let constants = node
            .constants
            .iter()
            .map(|c| {
                let across = match (&c.value, c.uniform) {
                    (_, false) => AcrossPartitions::Heterogeneous,
                    (None, true) => AcrossPartitions::Uniform(None),
                    (Some(value), true) => {
                        AcrossPartitions::Uniform(Some(ScalarValue::try_from(value)?))
                    }
                };
                Ok(ConstExpr::new(decode_expr(c.expr.as_ref())?, across))
            })
            .collect::<Result<Vec<_>>>()?;
        equivalences.add_constants(constants)?;
        let properties = PlanProperties::new(
            equivalences,
            partitioning,
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        let pipeline = PipelineId(usize::try_from(node.pipeline).map_err(|_| {
            internal_datafusion_err!(
                "migrated MaterializedExec pipeline {} out of range",
                node.pipeline
            )
        })?);
        let statistics = Statistics::new_unknown(&schema);
        Ok(Arc::new(MaterializedExec::migrated(
            pipeline,
            &properties,
            statistics,
        )))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(offload) = node.downcast_ref::<OffloadExec>() {
            let fragment = offload.fragment();
            let message = OffloadNode {
                plan: fragment.plan.clone(),
                input_schema: crate::state_cache::encode_schema(&fragment.input_schema)
                    .map_err(|e| internal_datafusion_err!("encoding OffloadExec: {e}"))?,
                offload: true,
            };
            return message
                .encode(buf)
                .map_err(|e| internal_datafusion_err!("encoding OffloadExec: {e}"));
        }
        if let Some(gate) = node.downcast_ref::<MorselGateExec>() {
            let message = MorselGateNode {
                skip: gate.skip().to_vec(),
            };
            return message
                .encode(buf)
                .map_err(|e| internal_datafusion_err!("encoding MorselGateExec: {e}"));
        }
        // A store leaf reads this execution's own outputs: it never travels.
        let Some(leaf) = MaterializedExec::of(node.as_ref(), Source::Migrated) else {
            return not_impl_err!("plan node {} cannot be shipped to a worker", node.name());
        };
        let properties = leaf.properties();
        let ordering = match properties.output_ordering() {
            Some(ordering) => {
                serialize_physical_sort_exprs(ordering.iter().cloned(), self, proto_converter)?
            }
            None => Vec::new(),
        };
        let eq = &properties.eq_properties;
        let encode_expr =
            |e: &Arc<dyn PhysicalExpr>| proto_converter.physical_expr_to_proto(e, self);
        let constants = eq
            .constants()
            .into_iter()
            .map(|c| {
                let (uniform, value) = match &c.across_partitions {
                    AcrossPartitions::Heterogeneous => (false, None),
                    AcrossPartitions::Uniform(None) => (true, None),
                    AcrossPartitions::Uniform(Some(v)) => {
                        (true, Some(protobuf::ScalarValue::try_from(v)?))
                    }
                };
                Ok(ConstantNode {
                    expr: Some(encode_expr(&c.expr)?),
                    uniform,
                    value,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let equivalences = eq
            .eq_group()
            .iter()
            .filter(|class| class.len() > 1)
            .map(|class| {
                let exprs = class.iter().map(encode_expr).collect::<Result<Vec<_>>>()?;
                Ok(EquivalenceClassNode { exprs })
            })
            .collect::<Result<Vec<_>>>()?;
        let message = MigratedStateNode {
            pipeline: leaf.pipeline().0 as u64,
            schema: Some(protobuf::Schema::try_from(leaf.schema().as_ref())?),
            partitioning: Some(serialize_partitioning(
                &properties.partitioning,
                self,
                proto_converter,
            )?),
            ordering,
            constants,
            equivalences,
        };
        message
            .encode(buf)
            .map_err(|e| internal_datafusion_err!("encoding a migrated MaterializedExec: {e}"))
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
