//! Min/max per chunk (pipeline groups,
//! `../shared/papers/pipeline-groups-disaggregated.txt` §3: the memory unit
//! keeps per-chunk metadata so that chunks a query cannot use are never
//! sent). A load notes the minimum and maximum of each *zone* of each
//! chunk (the chunk's rows, [`ZONE_ROWS`] at a time); a scan's request
//! carries its predicate ([`ChunkPrune`]), and the node sends only the rows
//! that the predicate, evaluated by DataFusion's `PruningPredicate` over
//! those bounds, does not rule out.
//!
//! The columns of a row group are cut at different rows (each by its own
//! bytes), so the rows are judged in *segments*: the spans between any two
//! consecutive zone cuts of the predicate's columns, each bounded by the
//! min/max of the zone of every column that holds it. A zone's bounds hold
//! for every part of it, so a segment is ruled out only if each of its rows
//! is; a chunk is sent when any of its rows is kept.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, UInt64Array};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::execution::TaskContext;
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::Accumulator;
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use datafusion_proto::physical_plan::DefaultPhysicalExtensionCodec;
use datafusion_proto::physical_plan::from_proto::parse_physical_expr;
use prost::Message;
use skiff_engine::buffer::every_row;
use skiff_flight::protocol::ChunkPrune;

use crate::limits::ZONE_ROWS;

/// One zone: its first row in the row group, and the bounds of its values
/// (nulls aside).
#[derive(Clone, Debug)]
pub(super) struct Zone {
    pub first: usize,
    pub min: ScalarValue,
    pub max: ScalarValue,
}

/// The zones of a column cut into chunks at `chunks`: each chunk's rows
/// [`ZONE_ROWS`] at a time (first row and rows).
fn zone_cuts(chunks: &[(usize, usize)]) -> Vec<(usize, usize)> {
    chunks
        .iter()
        .flat_map(|&(first, rows)| {
            (first..first + rows)
                .step_by(ZONE_ROWS)
                .map(move |at| (at, ZONE_ROWS.min(first + rows - at)))
        })
        .collect()
}

/// The zones of `array` cut into chunks at `chunks`, or `None` when its
/// type has no bounds.
pub(super) fn zones(array: &ArrayRef, chunks: &[(usize, usize)]) -> Option<Vec<Zone>> {
    let data_type = array.data_type();
    zone_cuts(chunks)
        .into_iter()
        .map(|(first, rows)| {
            let slice = array.slice(first, rows);
            let mut min = MinAccumulator::try_new(data_type).ok()?;
            let mut max = MaxAccumulator::try_new(data_type).ok()?;
            min.update_batch(std::slice::from_ref(&slice)).ok()?;
            max.update_batch(&[slice]).ok()?;
            Some(Zone {
                first,
                min: min.evaluate().ok()?,
                max: max.evaluate().ok()?,
            })
        })
        .collect()
}

/// One column of the row group as the predicate sees it: its zones, and
/// the type the predicate reads it as.
pub(super) struct ColumnZones<'a> {
    pub zones: &'a [Zone],
    pub data_type: DataType,
}

/// A scan's predicate, ready to judge row groups.
pub(super) struct Prune {
    predicate: PruningPredicate,
    schema: SchemaRef,
    /// The predicate's columns: name and top-level index in the file.
    pub columns: Vec<(String, usize)>,
}

impl Prune {
    /// `prune` decoded against `ctx`'s functions; why not, when it cannot
    /// be (the request is then answered whole).
    pub fn decode(prune: &ChunkPrune, ctx: &TaskContext) -> Result<Self, String> {
        let schema = datafusion_proto::protobuf::Schema::decode(prune.schema.as_slice())
            .map_err(|e| format!("schema: {e}"))?;
        let schema: Arc<Schema> = Arc::new((&schema).try_into().map_err(|e| format!("{e}"))?);
        let node = datafusion_proto::protobuf::PhysicalExprNode::decode(prune.predicate.as_slice())
            .map_err(|e| format!("predicate: {e}"))?;
        let expr = parse_physical_expr(&node, ctx, &schema, &DefaultPhysicalExtensionCodec {})
            .map_err(|e| format!("predicate: {e}"))?;
        let predicate = PruningPredicateBuilder::new()
            .with_file_schema(Arc::clone(&schema))
            .try_build(expr)
            .map_err(|e| e.to_string())?;
        if prune.names.len() != prune.roots.len() {
            return Err("predicate columns and their indices differ in number".to_string());
        }
        let columns = prune
            .names
            .iter()
            .zip(&prune.roots)
            .map(|(name, root)| {
                Ok((
                    name.clone(),
                    usize::try_from(*root).map_err(|e| e.to_string())?,
                ))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            predicate,
            schema,
            columns,
        })
    }

    /// The type the predicate reads column `name` as.
    pub fn data_type(&self, name: &str) -> Option<DataType> {
        self.schema
            .field_with_name(name)
            .ok()
            .map(|f| f.data_type().clone())
    }

    /// The rows of a row group of `rows` rows that the predicate may keep,
    /// given the bounds of some of its columns (`columns`, by name): sorted,
    /// disjoint, adjacent ones joined. All of them where the bounds cannot
    /// be used.
    pub fn kept(
        &self,
        columns: &HashMap<String, ColumnZones<'_>>,
        rows: usize,
    ) -> Vec<Range<usize>> {
        if rows == 0 {
            return Vec::new();
        }
        let everything = || every_row(rows);
        let mut starts: Vec<usize> = columns
            .values()
            .flat_map(|c| c.zones.iter().map(|z| z.first))
            .filter(|&first| first < rows)
            .collect();
        starts.push(0);
        starts.sort_unstable();
        starts.dedup();
        let segments = Segments {
            starts: &starts,
            rows,
            columns,
        };
        let Ok(keep) = self.predicate.prune(&segments) else {
            return everything();
        };
        if keep.len() != starts.len() {
            return everything();
        }
        let mut kept: Vec<Range<usize>> = Vec::new();
        for (at, keep) in keep.into_iter().enumerate() {
            if !keep {
                continue;
            }
            let (start, end) = (starts[at], starts.get(at + 1).copied().unwrap_or(rows));
            match kept.last_mut() {
                Some(last) if last.end == start => last.end = end,
                _ => kept.push(start..end),
            }
        }
        kept
    }
}

/// A row group's segments as DataFusion's pruning sees containers.
struct Segments<'a> {
    starts: &'a [usize],
    rows: usize,
    columns: &'a HashMap<String, ColumnZones<'a>>,
}

impl Segments<'_> {
    /// For each segment, `bound` of the zone of `column` holding it.
    fn bounds(&self, column: &Column, bound: fn(&Zone) -> &ScalarValue) -> Option<ArrayRef> {
        let zones = self.columns.get(column.name())?;
        let values = self.starts.iter().map(|&start| {
            // The last zone that starts at or before the segment.
            let at = zones.zones.partition_point(|z| z.first <= start);
            at.checked_sub(1)
                .and_then(|at| zones.zones.get(at))
                .map_or(ScalarValue::Null, |z| bound(z).clone())
        });
        let array = ScalarValue::iter_to_array(values).ok()?;
        if array.data_type() == &zones.data_type {
            return Some(array);
        }
        arrow::compute::cast(&array, &zones.data_type).ok()
    }
}

impl PruningStatistics for Segments<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.bounds(column, |z| &z.min)
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.bounds(column, |z| &z.max)
    }

    fn num_containers(&self) -> usize {
        self.starts.len()
    }

    /// Not known per segment (a zone's count may lie in any part of it):
    /// predicates on nulls never rule a segment out.
    fn null_counts(&self, _column: &Column) -> Option<ArrayRef> {
        None
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        let ends = self.starts.iter().skip(1).copied().chain([self.rows]);
        let counts = self.starts.iter().zip(ends).map(|(s, e)| (e - s) as u64);
        Some(Arc::new(UInt64Array::from_iter_values(counts)))
    }

    fn contained(
        &self,
        _column: &Column,
        _values: &std::collections::HashSet<ScalarValue>,
    ) -> Option<BooleanArray> {
        None
    }
}

#[cfg(test)]
pub(super) mod tests {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::Field;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_expr::expressions::{BinaryExpr, Column as ColumnExpr, lit};
    use datafusion::prelude::SessionContext;
    use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;

    use super::*;

    pub(crate) fn encoded(
        schema: &Schema,
        expr: Arc<dyn PhysicalExpr>,
        names: &[(&str, u64)],
    ) -> ChunkPrune {
        let schema: datafusion_proto::protobuf::Schema = schema.try_into().unwrap();
        let node = serialize_physical_expr(&expr, &DefaultPhysicalExtensionCodec {}).unwrap();
        ChunkPrune {
            schema: schema.encode_to_vec(),
            predicate: node.encode_to_vec(),
            names: names.iter().map(|(n, _)| n.to_string()).collect(),
            roots: names.iter().map(|(_, r)| *r).collect(),
            rows: 1000,
        }
    }

    fn cuts(rows: usize, per: usize) -> Vec<(usize, usize)> {
        (0..rows)
            .step_by(per)
            .map(|at| (at, per.min(rows - at)))
            .collect()
    }

    #[test]
    fn chunks_are_cut_into_zones_of_at_most_zone_rows() {
        let chunks = [(0, ZONE_ROWS * 2 + 5), (ZONE_ROWS * 2 + 5, 7)];
        let zones = zone_cuts(&chunks);
        assert_eq!(
            zones,
            vec![
                (0, ZONE_ROWS),
                (ZONE_ROWS, ZONE_ROWS),
                (ZONE_ROWS * 2, 5),
                (ZONE_ROWS * 2 + 5, 7)
            ]
        );
    }

    #[test]
    fn segments_the_bounds_rule_out_are_not_kept() {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]);
        let ctx = SessionContext::new().task_ctx();
        // k = row number, cut every 100 rows; s cut every 150 rows.
        let k: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
        let s: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..1000).map(|i| format!("{:04}", i)),
        ));
        let (k_cuts, s_cuts) = (cuts(1000, 100), cuts(1000, 150));
        let (k_zones, s_zones) = (zones(&k, &k_cuts).unwrap(), zones(&s, &s_cuts).unwrap());
        assert_eq!(k_zones[3].first, 300);
        assert_eq!(k_zones[3].min, ScalarValue::Int64(Some(300)));
        assert_eq!(s_zones[1].max, ScalarValue::Utf8(Some("0299".into())));
        let column = |name: &str, index| Arc::new(ColumnExpr::new(name, index));
        let mut held = HashMap::new();
        held.insert(
            "k".to_string(),
            ColumnZones {
                zones: &k_zones,
                data_type: DataType::Int64,
            },
        );

        // k >= 420 AND k < 480: the chunk 400..500 only.
        let expr = Arc::new(BinaryExpr::new(
            Arc::new(BinaryExpr::new(column("k", 0), Operator::GtEq, lit(420i64))),
            Operator::And,
            Arc::new(BinaryExpr::new(column("k", 0), Operator::Lt, lit(480i64))),
        ));
        let prune = Prune::decode(&encoded(&schema, expr, &[("k", 0)]), &ctx).unwrap();
        assert_eq!(prune.kept(&held, 1000), vec![400..500]);

        // With s's bounds too, segments are cut where either column is: s
        // > '0905' keeps from the s chunk starting at 900.
        held.insert(
            "s".to_string(),
            ColumnZones {
                zones: &s_zones,
                data_type: DataType::Utf8,
            },
        );
        let expr = Arc::new(BinaryExpr::new(column("s", 1), Operator::Gt, lit("0905")));
        let prune = Prune::decode(&encoded(&schema, expr, &[("s", 1)]), &ctx).unwrap();
        assert_eq!(prune.kept(&held, 1000), vec![900..1000]);

        // A predicate the bounds cannot judge (OR with a column not held)
        // keeps everything; so does one that rules nothing out.
        let expr = Arc::new(BinaryExpr::new(
            Arc::new(BinaryExpr::new(column("k", 0), Operator::Lt, lit(5i64))),
            Operator::Or,
            Arc::new(BinaryExpr::new(column("s", 1), Operator::Gt, lit("0000"))),
        ));
        let prune = Prune::decode(&encoded(&schema, expr, &[("k", 0), ("s", 1)]), &ctx).unwrap();
        held.remove("s");
        assert_eq!(prune.kept(&held, 1000), vec![0..1000]);
        // Nothing left: no rows.
        let expr = Arc::new(BinaryExpr::new(column("k", 0), Operator::Gt, lit(5000i64)));
        let prune = Prune::decode(&encoded(&schema, expr, &[("k", 0)]), &ctx).unwrap();
        assert!(prune.kept(&held, 1000).is_empty());
    }

    #[test]
    fn a_bad_predicate_is_refused_not_a_panic() {
        let ctx = SessionContext::new().task_ctx();
        let prune = ChunkPrune {
            schema: vec![1, 2, 3],
            predicate: vec![9; 8],
            names: vec![],
            roots: vec![],
            rows: 10,
        };
        assert!(Prune::decode(&prune, &ctx).is_err());
    }
}
