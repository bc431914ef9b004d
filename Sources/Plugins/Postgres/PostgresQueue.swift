import Foundation
import PipelineKit
import Synchronization

/// A work queue in one PostgreSQL table: what `pipelinectl queue` sets up and fills, and what the
/// `postgres` list claims from.
///
/// Each row is one source. Its `state` is `queued` (waiting, from `visible_at`), `running` (claimed
/// by `worker` until `lease_until`), or `failed` (for good, with `error_kind` and `error`); a done
/// item's row is deleted. Claims take rows with `FOR UPDATE SKIP LOCKED`, so workers never wait for
/// each other, and count `attempts`. A running row whose lease ran out (its worker died) is queued
/// again, or failed as `abandoned` once it has used up its attempts (an image that kills the
/// worker does not loop). An insert into the table notifies the channel named as the table, which
/// wakes idle workers at once.
public final class PostgresQueue: Sendable {
    public let url: PostgresQueueURL
    let connection: PostgresConnection
    /// The table, quoted for SQL.
    let table: String
    /// Whether the table has the `traceparent` column (one made before traces has not, until
    /// `queue init` runs again); `nil` until looked at.
    private let traceColumn = Mutex<Bool?>(nil)

    init(url: PostgresQueueURL, connection: PostgresConnection) {
        self.url = url
        self.connection = connection
        table = url.table.split(separator: ".").map { "\"\($0)\"" }.joined(separator: ".")
    }

    /// The notification channel: the table's name.
    var channel: String { url.table }
    /// A name derived from the table's for its index, function and trigger.
    private func derived(_ suffix: String) -> String {
        let name = url.table.replacingOccurrences(of: ".", with: "_") + "_" + suffix
        let schema = url.table.contains(".") ? "\"\(url.table.split(separator: ".")[0])\"." : ""
        return suffix == "notify" ? schema + "\"\(name)\"" : "\"\(name)\""
    }

    /// Creates the table, its indexes and its notification trigger if they are missing (safe to
    /// run again, and by several workers at once).
    public func initialize() async throws {
        let statements = [
            url.table.contains(".") ? "CREATE SCHEMA IF NOT EXISTS \"\(url.table.split(separator: ".")[0])\"" : nil,
            """
            CREATE TABLE IF NOT EXISTS \(table) (
              id bigserial PRIMARY KEY,
              source text NOT NULL CHECK (source <> ''),
              state text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'failed')),
              attempts integer NOT NULL DEFAULT 0,
              enqueued_at timestamptz NOT NULL DEFAULT now(),
              visible_at timestamptz NOT NULL DEFAULT now(),
              lease_until timestamptz,
              worker text,
              error_kind text,
              error text,
              updated_at timestamptz NOT NULL DEFAULT now(),
              traceparent text)
            """,
            // Tables made before traces: the column the W3C trace context of a row rides in.
            "ALTER TABLE \(table) ADD COLUMN IF NOT EXISTS traceparent text",
            "CREATE INDEX IF NOT EXISTS \(derived("ready")) ON \(table) (id) WHERE state = 'queued'",
            "CREATE INDEX IF NOT EXISTS \(derived("leases")) ON \(table) (lease_until) WHERE state = 'running'",
            """
            CREATE OR REPLACE FUNCTION \(derived("notify"))() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_notify('\(channel)', ''); RETURN NULL; END $$
            """,
            """
            CREATE OR REPLACE TRIGGER \(derived("notify_insert")) AFTER INSERT ON \(table)
            FOR EACH STATEMENT EXECUTE FUNCTION \(derived("notify"))()
            """,
        ]
        // Two workers creating the same objects at once can collide in the catalog: one retry.
        for statement in statements.compactMap({ $0 }) {
            do { try await connection.query(statement) } catch {
                try await connection.query(statement)
            }
        }
    }

    /// Throws `not_found` telling to run `pipelinectl queue init` when the table is missing or
    /// is not a queue table.
    public func check() async throws {
        do {
            try await connection.query("SELECT id, source, state, attempts, visible_at, lease_until, worker, error_kind, error FROM \(table) LIMIT 0")
        } catch let error as PipelineError where error.kind == .notFound || error.message.contains("column") {
            throw PipelineError(.notFound, "\(url.redacted): no queue table \(url.table) (create it with: pipelinectl queue init '\(url.redacted)')")
        }
    }

    /// Whether the table has the `traceparent` column (looked up once).
    func hasTraceColumn() async -> Bool {
        if let known = traceColumn.withLock({ $0 }) { return known }
        let found = (try? await connection.query("SELECT traceparent FROM \(table) LIMIT 0")) != nil
        traceColumn.withLock { $0 = found }
        return found
    }

    /// Adds `sources` (one row each) with COPY; how many were added. Sources are trimmed; empty
    /// lines and `#` comments are skipped, as in a URL list.
    public func enqueue(_ lines: some Sequence<String>) async throws -> Int {
        try await enqueue(lines, traceparent: nil)
    }

    /// Adds `sources` as ``enqueue(_:)`` does, each row's item continuing the W3C trace context
    /// `traceparent` (a table made before traces needs `queue init` again).
    public func enqueue(_ lines: some Sequence<String>, traceparent: String?) async throws -> Int {
        if traceparent != nil, !(await hasTraceColumn()) {
            throw PipelineError(.notFound, "\(url.redacted): the queue table \(url.table) has no traceparent column; add it with: pipelinectl queue init '\(url.redacted)' (safe to run again)")
        }
        let trace = traceparent.map { "\t" + $0.copyEscaped } ?? ""
        var chunks: [Data] = []
        var chunk = Data()
        for line in lines {
            let source = line.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !source.isEmpty, !source.hasPrefix("#") else { continue }
            chunk.append(contentsOf: (source.copyEscaped + trace + "\n").utf8)
            if chunk.count >= 1 << 20 {
                chunks.append(chunk)
                chunk = Data()
            }
        }
        if !chunk.isEmpty { chunks.append(chunk) }
        guard !chunks.isEmpty else { return 0 }
        return try await connection.copyIn("COPY \(table) (source\(traceparent == nil ? "" : ", traceparent")) FROM STDIN", chunks)
    }

    /// A claimed row: its id, source and how many times it has been claimed (this claim included),
    /// and the trace context it carries.
    struct Claim: Sendable, Equatable {
        let id: String
        let source: String
        let attempts: Int
        var traceparent: String?
    }

    /// Returns rows whose lease ran out to the queue, or fails them as `abandoned` after `maxAttempts`.
    func reclaimExpired(maxAttempts: Int) async throws {
        try await connection.query("""
            UPDATE \(table) SET
              state = CASE WHEN attempts >= $1 THEN 'failed' ELSE 'queued' END,
              error_kind = CASE WHEN attempts >= $1 THEN 'abandoned' ELSE error_kind END,
              error = CASE WHEN attempts >= $1 THEN 'the worker holding it stopped ' || attempts || ' times before finishing (last: ' || coalesce(worker, '?') || ')' ELSE error END,
              visible_at = now(), lease_until = NULL, updated_at = now()
            WHERE state = 'running' AND lease_until < now()
            """, [String(maxAttempts)], prepared: true)
    }

    /// Claims up to `limit` queued rows that are due for `worker`, leased for `lease` seconds.
    ///
    /// A prepared statement, so its plan is generic: the rows to claim are collected into an array
    /// first (`id = ANY(ARRAY(...))`), which plans as two index scans whatever the limit; a join
    /// with the subquery was planned as a scan of the whole table once generic.
    func claim(limit: Int, lease: Int, worker: String) async throws -> [Claim] {
        let traced = await hasTraceColumn()
        let rows = try await connection.query("""
            UPDATE \(table) q SET state = 'running', attempts = q.attempts + 1, lease_until = now() + make_interval(secs => $2),
              worker = $3, updated_at = now()
            WHERE q.id = ANY(ARRAY(
              SELECT id FROM \(table) WHERE state = 'queued' AND visible_at <= now() ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED))
            RETURNING q.id, q.source, q.attempts\(traced ? ", q.traceparent" : "")
            """, [String(limit), String(lease), worker], prepared: true)
        return rows.compactMap { row in
            guard row.count >= 3, let id = row[0], let source = row[1], let attempts = row[2].flatMap({ Int($0) }) else { return nil }
            return Claim(id: id, source: source, attempts: attempts, traceparent: row.count > 3 ? row[3] : nil)
        }.sorted { (Int($0.id) ?? 0) < (Int($1.id) ?? 0) }
    }

    /// Extends the leases of `claims` held by `worker` by `lease` seconds.
    func extend(_ claims: [Claim], lease: Int, worker: String) async throws {
        guard !claims.isEmpty else { return }
        try await connection.query("""
            UPDATE \(table) SET lease_until = now() + make_interval(secs => $2), updated_at = now()
            WHERE id = ANY($1::bigint[]) AND state = 'running' AND worker = $3
            """, ["{" + claims.map(\.id).joined(separator: ",") + "}", String(lease), worker], prepared: true)
    }

    /// Deletes a done row, unless a later claim took it.
    func acknowledge(_ claim: Claim) async throws { try await acknowledge([claim]) }

    /// Deletes done rows in one statement, each unless a later claim took it (its attempts grew):
    /// that claim's worker deletes it when done. A row whose lease ran out while it was being
    /// made (queued again, or failed as abandoned) is done all the same, and deleted.
    ///
    /// The row's state is not in the condition: with `state = 'running'` the generic plan of the
    /// prepared statement scanned every running row through the leases index for each row
    /// deleted (3.9 ms a statement in a worker claiming about 140 rows at a time, against 0.2 ms).
    func acknowledge(_ claims: [Claim]) async throws {
        guard !claims.isEmpty else { return }
        try await connection.query("""
            DELETE FROM \(table) q USING unnest($1::bigint[], $2::integer[]) AS d(id, attempts)
            WHERE q.id = d.id AND q.attempts = d.attempts
            """, ["{" + claims.map(\.id).joined(separator: ",") + "}", "{" + claims.map { String($0.attempts) }.joined(separator: ",") + "}"],
            prepared: true)
    }

    /// Queues a claimed row again after `delay` seconds (0: at once), keeping `error` as its last error.
    func release(_ claim: Claim, after delay: Int, error: ItemError?) async throws {
        try await connection.query("""
            UPDATE \(table) SET state = 'queued', visible_at = now() + make_interval(secs => $3), lease_until = NULL,
              worker = NULL, error_kind = $4, error = $5, updated_at = now()
            WHERE id = $1 AND attempts = $2 AND state = 'running'
            """, [claim.id, String(claim.attempts), String(delay), error?.kind.rawValue, error?.message])
    }

    /// Releases `claims` at once and takes back the attempts they counted (they never started).
    /// Only rows `worker` still holds: a row whose lease ran out and that another worker claimed
    /// since is that worker's.
    func handBack(_ claims: [Claim], worker: String) async throws {
        guard !claims.isEmpty else { return }
        try await connection.query("""
            UPDATE \(table) SET state = 'queued', attempts = greatest(attempts - 1, 0), visible_at = now(), lease_until = NULL,
              worker = NULL, updated_at = now()
            WHERE id = ANY($1::bigint[]) AND state = 'running' AND worker = $2
            """, ["{" + claims.map(\.id).joined(separator: ",") + "}", worker])
    }

    /// Marks a claimed row failed for good, with the error's kind and message.
    func fail(_ claim: Claim, error: ItemError) async throws {
        try await connection.query("""
            UPDATE \(table) SET state = 'failed', lease_until = NULL, error_kind = $3, error = $4, updated_at = now()
            WHERE id = $1 AND attempts = $2 AND state = 'running'
            """, [claim.id, String(claim.attempts), error.kind.rawValue, "\(error.stage.rawValue): \(error.message)"])
    }

    /// Queues failed rows again (those of `kind`, or all), with their attempts reset; how many.
    public func requeueFailed(kind: String? = nil) async throws -> Int {
        let rows = try await connection.query("""
            UPDATE \(table) SET state = 'queued', attempts = 0, visible_at = now(), worker = NULL, updated_at = now()
            WHERE state = 'failed' AND ($1::text IS NULL OR error_kind = $1) RETURNING 1
            """, [kind])
        if !rows.isEmpty { try await connection.query("SELECT pg_notify($1, '')", [channel]) }
        return rows.count
    }

    /// Deletes failed rows (those of `kind`, or all); how many.
    public func purgeFailed(kind: String? = nil) async throws -> Int {
        try await connection.query("DELETE FROM \(table) WHERE state = 'failed' AND ($1::text IS NULL OR error_kind = $1) RETURNING 1",
                                   [kind]).count
    }

    /// The queue's figures now.
    public func status() async throws -> QueueStatus {
        let totals = try await connection.query("""
            SELECT count(*) FILTER (WHERE state = 'queued'),
                   count(*) FILTER (WHERE state = 'queued' AND visible_at > now()),
                   count(*) FILTER (WHERE state = 'running'),
                   count(DISTINCT worker) FILTER (WHERE state = 'running'),
                   count(*) FILTER (WHERE state = 'failed'),
                   coalesce(extract(epoch FROM now() - min(enqueued_at) FILTER (WHERE state = 'queued')), 0)
            FROM \(table)
            """)
        let row = totals.first ?? []
        func int(_ index: Int) -> Int { row.count > index ? Int(row[index] ?? "") ?? 0 : 0 }
        var status = QueueStatus(queued: int(0), delayed: int(1), running: int(2), workers: int(3), failed: int(4),
                                 oldestQueuedSeconds: row.count > 5 ? Double(row[5] ?? "") ?? 0 : 0)
        let kinds = try await connection.query("SELECT coalesce(error_kind, '?'), count(*) FROM \(table) WHERE state = 'failed' GROUP BY 1 ORDER BY 2 DESC, 1")
        status.failedByKind = kinds.compactMap { row in
            guard row.count == 2, let kind = row[0], let count = row[1].flatMap({ Int($0) }) else { return nil }
            return QueueStatus.KindCount(kind: kind, count: count)
        }
        return status
    }

    /// Listens to the queue's channel on this connection.
    func listen() async throws {
        try await connection.query("LISTEN \"\(channel)\"")
    }

    /// Waits up to `timeout` seconds for an insert to be notified; whether one was.
    func waitForWork(timeout: Double) async throws -> Bool {
        try await connection.waitForNotification(timeout: timeout)
    }
}
