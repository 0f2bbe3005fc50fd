//! The pipeline grouper (`../shared/papers/pipeline-groups-disaggregated.txt`
//! §2): across the pipeline graphs of a batch of queries, pipelines whose
//! scans read the same columns of tables held in memory nodes are put in
//! one *pipeline group*, whose scans then share one chunk cache
//! ([`GroupCache`]): each column of each row group crosses the wire once
//! for the group.
//!
//! Grouping is greedy by overlap, as the paper's: start from one group per
//! pipeline that reads a held table, and keep merging the two groups that
//! share the most columns, while the merged group's columns fit the memory
//! budget and no pipeline of it depends (transitively) on another of it —
//! a pipeline and its input never run at once. Pipelines left alone read
//! as if there were no batch.
//!
//! The budget is counted on whole columns (the statistics' byte sizes of
//! the scanned files, or their rows times the type's width): a group's
//! cache keeps a column's row groups only until every scan of the group
//! has passed them, but nothing makes the scans keep pace, so whole
//! columns are what the cache could hold.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::Statistics;
use datafusion::common::stats::Precision;
use datafusion::datasource::physical_plan::FileSource;
use datafusion::datasource::source::DataSource;

use crate::buffer::{ChunkSource, GroupCache, GroupScans, parquet_scans, table_location};
use crate::pipeline::{PipelineGraph, PipelineId};

/// A column of a table, as groups name what they share: (table location,
/// column name).
pub type TableColumn = (Arc<str>, String);

/// One pipeline group of a batch.
#[derive(Clone)]
pub struct Group {
    /// `batch.n`: the n-th group of its batch.
    pub label: String,
    /// (query's index in the batch, pipeline), in batch order.
    pub members: Vec<(usize, PipelineId)>,
    /// Columns two or more members read.
    pub shared: BTreeSet<TableColumn>,
    /// Every column the members read from held tables.
    pub columns: BTreeSet<TableColumn>,
    /// Bytes of those columns, as the scans' statistics give them (0 when
    /// they give none).
    pub bytes: usize,
    pub cache: Arc<GroupCache>,
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("label", &self.label)
            .field("members", &self.members)
            .field("shared", &self.shared)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl Group {
    /// `lineitem.l_orderkey, ...`: the shared columns, by the last part of
    /// the table's location.
    pub fn shared_names(&self) -> String {
        let names: Vec<String> = self
            .shared
            .iter()
            .map(|(table, column)| {
                let name = table.trim_end_matches('/').rsplit('/').next().unwrap_or("");
                format!("{name}.{column}")
            })
            .collect();
        names.join(", ")
    }
}

/// The groups of a batch, and what each query's pipelines read through.
#[derive(Debug, Default)]
pub struct Grouping {
    pub groups: Vec<Group>,
    /// For each query of the batch, its grouped pipelines' scans.
    pub assignments: Vec<GroupAssignment>,
}

/// A query's grouped pipelines and the group caches their scans read
/// through (a session extension the executor reads).
#[derive(Clone, Debug, Default)]
pub struct GroupAssignment(pub HashMap<PipelineId, GroupScans>);

/// What one pipeline reads from held tables.
struct Needs {
    query: usize,
    pipeline: PipelineId,
    /// For each Parquet scan of its plan: the files, the columns read (by
    /// name) and their bytes; `None` for a scan of a table not held.
    scans: Vec<Option<ScanNeeds>>,
    columns: BTreeMap<TableColumn, usize>,
}

struct ScanNeeds {
    table: Arc<str>,
    files: Vec<String>,
    columns: Vec<String>,
}

/// Group the pipelines of `graphs` (a batch, in arrival order) whose scans
/// read tables `source` holds, each group within `budget` bytes.
pub fn group(
    batch: u64,
    graphs: &[&PipelineGraph],
    source: &Arc<dyn ChunkSource>,
    budget: usize,
) -> Grouping {
    let needs: Vec<Needs> = graphs
        .iter()
        .enumerate()
        .flat_map(|(query, graph)| {
            graph
                .pipelines()
                .iter()
                .filter_map(move |p| needs_of(query, p.id, &p.plan, source.as_ref()))
        })
        .collect();
    let ancestors: Vec<Vec<BTreeSet<PipelineId>>> = graphs.iter().map(|g| ancestors(g)).collect();
    let related = |a: &Needs, b: &Needs| {
        a.query == b.query
            && (ancestors[a.query][a.pipeline.0].contains(&b.pipeline)
                || ancestors[b.query][b.pipeline.0].contains(&a.pipeline))
    };
    let sets = merge_greedily(&needs, budget, &related);
    let mut grouping = Grouping {
        groups: Vec::new(),
        assignments: vec![GroupAssignment::default(); graphs.len()],
    };
    let columns_of = |set: &[usize]| -> BTreeMap<TableColumn, usize> {
        set.iter()
            .flat_map(|&i| needs[i].columns.iter().map(|(c, b)| (c.clone(), *b)))
            .collect()
    };
    for mut set in sets.into_iter().filter(|s| s.len() > 1) {
        set.sort_by_key(|&i| (needs[i].query, needs[i].pipeline));
        let cache = GroupCache::new(Arc::clone(source));
        let mut readers: BTreeMap<TableColumn, usize> = BTreeMap::new();
        for &i in &set {
            let need = &needs[i];
            for column in need.columns.keys() {
                *readers.entry(column.clone()).or_default() += 1;
            }
            let members = need
                .scans
                .iter()
                .map(|scan| {
                    scan.as_ref()
                        .map(|scan| cache.register(&scan.files, &scan.columns))
                })
                .collect();
            let scans = GroupScans {
                label: Arc::from(format!("{batch}.{}", grouping.groups.len())),
                cache: Arc::clone(&cache),
                members,
            };
            grouping.assignments[need.query]
                .0
                .insert(need.pipeline, scans);
        }
        let columns = columns_of(&set);
        grouping.groups.push(Group {
            label: format!("{batch}.{}", grouping.groups.len()),
            members: set
                .iter()
                .map(|&i| (needs[i].query, needs[i].pipeline))
                .collect(),
            shared: readers
                .into_iter()
                .filter(|(_, n)| *n > 1)
                .map(|(c, _)| c)
                .collect(),
            bytes: columns.values().sum(),
            columns: columns.into_keys().collect(),
            cache,
        });
    }
    grouping
}

/// Sets of indices into `needs`: one per pipeline at first, then the two
/// sets sharing the most columns merged while their union fits `budget`
/// and no two of its pipelines are `related`. Overlaps are kept in a
/// matrix, a row recomputed per merge: a batch's pipelines are grouped in
/// about n³ integer comparisons, not n³ set intersections. A pair found
/// unable to merge never can (unions only grow), so it is struck out.
fn merge_greedily(
    needs: &[Needs],
    budget: usize,
    related: &dyn Fn(&Needs, &Needs) -> bool,
) -> Vec<Vec<usize>> {
    let n = needs.len();
    let mut sets: Vec<Option<Vec<usize>>> = (0..n).map(|i| Some(vec![i])).collect();
    let mut columns: Vec<BTreeMap<TableColumn, usize>> =
        needs.iter().map(|need| need.columns.clone()).collect();
    let shared = |a: &BTreeMap<TableColumn, usize>, b: &BTreeMap<TableColumn, usize>| {
        a.keys().filter(|c| b.contains_key(*c)).count()
    };
    let mut overlap = vec![vec![0; n]; n];
    for a in 0..n {
        for b in a + 1..n {
            overlap[a][b] = shared(&columns[a], &columns[b]);
        }
    }
    loop {
        let mut best: Option<(usize, usize)> = None;
        let mut most = 0;
        for a in 0..n {
            for b in a + 1..n {
                if overlap[a][b] <= most {
                    continue;
                }
                let (Some(set_a), Some(set_b)) = (&sets[a], &sets[b]) else {
                    continue;
                };
                let bytes: usize = columns[a]
                    .iter()
                    .chain(&columns[b])
                    .collect::<BTreeMap<_, _>>()
                    .values()
                    .copied()
                    .sum();
                let independent = set_a
                    .iter()
                    .all(|&i| set_b.iter().all(|&j| !related(&needs[i], &needs[j])));
                if bytes <= budget && independent {
                    best = Some((a, b));
                    most = overlap[a][b];
                } else {
                    overlap[a][b] = 0;
                }
            }
        }
        let Some((a, b)) = best else { break };
        let merged = sets[b].take().unwrap_or_default();
        if let Some(set) = sets[a].as_mut() {
            set.extend(merged);
        }
        let gone = std::mem::take(&mut columns[b]);
        columns[a].extend(gone);
        for k in 0..n {
            overlap[b.min(k)][b.max(k)] = 0;
            if k == a || sets[k].is_none() {
                continue;
            }
            overlap[a.min(k)][a.max(k)] = shared(&columns[a], &columns[k]);
        }
    }
    sets.into_iter().flatten().collect()
}

/// What pipeline `pipeline` of query `query` reads from tables `source`
/// holds; `None` when it reads none.
fn needs_of(
    query: usize,
    pipeline: PipelineId,
    plan: &Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    source: &dyn ChunkSource,
) -> Option<Needs> {
    let mut columns = BTreeMap::new();
    let scans: Vec<Option<ScanNeeds>> = parquet_scans(plan)
        .into_iter()
        .map(|(config, parquet)| {
            let table = table_location(&config);
            if !source.holds(&table) {
                return None;
            }
            let file_schema = parquet.table_schema().file_schema();
            let schema = config.projected_schema().ok()?;
            let statistics = config.partition_statistics(None).ok();
            let mut names = Vec::new();
            for (at, field) in schema.fields().iter().enumerate() {
                // Partition columns are not in the files.
                if file_schema.field_with_name(field.name()).is_err() {
                    continue;
                }
                let bytes = statistics
                    .as_ref()
                    .map_or(0, |s| column_bytes(s, at, field.data_type()));
                names.push(field.name().clone());
                columns.insert((Arc::clone(&table), field.name().clone()), bytes);
            }
            let files = config
                .file_groups
                .iter()
                .flat_map(|g| g.iter())
                .map(|f| f.path().to_string())
                .collect();
            Some(ScanNeeds {
                table,
                files,
                columns: names,
            })
        })
        .collect();
    if columns.is_empty() {
        return None;
    }
    debug_assert!(scans.iter().flatten().all(|s| !s.table.is_empty()));
    Some(Needs {
        query,
        pipeline,
        scans,
        columns,
    })
}

/// Bytes assumed per value of a type of no fixed width (strings, lists).
const VARIABLE_WIDTH_BYTES: usize = 32;

/// A scanned column's bytes: its statistics' byte size when they give
/// one (Parquet listing tables), else its rows times its type's width
/// (Delta's statistics give rows only); 0 when neither is known.
fn column_bytes(statistics: &Statistics, at: usize, data_type: &DataType) -> usize {
    let known = |p: &Precision<usize>| match p {
        Precision::Exact(n) | Precision::Inexact(n) => Some(*n),
        Precision::Absent => None,
    };
    if let Some(bytes) = statistics
        .column_statistics
        .get(at)
        .and_then(|c| known(&c.byte_size))
    {
        return bytes;
    }
    let width = data_type.primitive_width().unwrap_or(VARIABLE_WIDTH_BYTES);
    known(&statistics.num_rows).map_or(0, |rows| rows.saturating_mul(width))
}

/// For each pipeline, every pipeline it depends on, directly or not.
fn ancestors(graph: &PipelineGraph) -> Vec<BTreeSet<PipelineId>> {
    let mut all: Vec<BTreeSet<PipelineId>> = Vec::with_capacity(graph.len());
    // Inputs have smaller ids than their readers.
    for pipeline in graph.pipelines() {
        let mut set = BTreeSet::new();
        for input in &pipeline.inputs {
            set.insert(*input);
            set.extend(all[input.0].iter().copied());
        }
        all.push(set);
    }
    all
}
