import CPQ
import Foundation
import PipelineKit

#if canImport(Glibc)
import Glibc
#endif

/// A `postgres://` URL as the queue names it: libpq's connection URI, with our own `table`
/// parameter taken out (the queue's table, default `pipelinectl_queue`). libpq reads what the URL
/// leaves out from its usual environment (PGPASSWORD, PGHOST, PGSSLMODE, ...) and ~/.pgpass.
public struct PostgresQueueURL: Sendable, Equatable {
    /// The URI given to libpq.
    public let connection: String
    /// The queue table, possibly schema-qualified (`jobs.thumbnails`).
    public let table: String
    /// The URL with any password replaced by `***`, for messages and reports.
    public let redacted: String

    public static let defaultTable = "pipelinectl_queue"

    /// Reads `url`; throws `invalid_source` naming what is wrong.
    public init(_ url: String) throws {
        guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else {
            throw PipelineError(.invalidSource, "'\(url)' is not a postgres:// URL (postgres://USER@HOST:5432/DATABASE?table=NAME)")
        }
        guard var parts = URLComponents(string: url) else {
            throw PipelineError(.invalidSource, "'\(Self.redact(url))' is not a valid URL (special characters in a password must be percent-encoded)")
        }
        var table = Self.defaultTable
        if let items = parts.queryItems {
            if let given = items.first(where: { $0.name == "table" })?.value { table = given }
            let rest = items.filter { $0.name != "table" }
            parts.queryItems = rest.isEmpty ? nil : rest
        }
        guard Self.isValidTable(table) else {
            throw PipelineError(.invalidSource, "table '\(table)' in '\(Self.redact(url))' is not a plain table name (letters, digits and _, optionally schema.table)")
        }
        self.table = table.lowercased()
        connection = parts.string ?? url
        redacted = Self.redact(url)
    }

    /// Whether `name` is `table` or `schema.table`, each an unquoted SQL identifier.
    static func isValidTable(_ name: String) -> Bool {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count) else { return false }
        return parts.allSatisfy { part in
            guard let first = part.first, first.isLetter || first == "_", part.count <= 50 else { return false }
            return part.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
        }
    }

    /// `url` with the password (`user:password@`) replaced by `***`.
    static func redact(_ url: String) -> String {
        guard let scheme = url.range(of: "://"), let at = url[scheme.upperBound...].firstIndex(of: "@") else { return url }
        let userInfo = url[scheme.upperBound..<at]
        guard let colon = userInfo.firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + ":***" + String(url[at...])
    }
}

/// One libpq connection. Calls block, so each runs on the connection's own serial queue, off
/// Swift's cooperative threads; they are made one at a time, in order.
final class PostgresConnection: @unchecked Sendable {
    private let conn: OpaquePointer
    private let queue: DispatchQueue
    /// The URL for messages (no password).
    let name: String
    /// Statements prepared on the server in this session, by their text: their names. Read and
    /// written on `queue` only; emptied when the connection is reset (a new session has none).
    private var prepared: [String: String] = [:]

    private init(conn: OpaquePointer, name: String) {
        self.conn = conn
        self.name = name
        queue = DispatchQueue(label: "pipelinectl.postgres")
    }

    deinit { PQfinish(conn) }

    /// Connects to `url`; throws `connect` naming the server and libpq's reason.
    static func connect(_ url: PostgresQueueURL) async throws -> PostgresConnection {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                guard let conn = PQconnectdb(url.connection) else {
                    continuation.resume(throwing: PipelineError(.connect, "\(url.redacted): cannot allocate a connection"))
                    return
                }
                guard PQstatus(conn) == CONNECTION_OK else {
                    let message = Self.message(of: conn)
                    PQfinish(conn)
                    let kind: ErrorKind = message.contains("password authentication failed") || message.contains("no password supplied") ? .auth : .connect
                    continuation.resume(throwing: PipelineError(kind, "\(url.redacted): cannot connect: \(message)"))
                    return
                }
                // Messages from the server (NOTICE: relation already exists, ...) are not printed.
                PQsetNoticeProcessor(conn, { _, _ in }, nil)
                continuation.resume(returning: PostgresConnection(conn: conn, name: url.redacted))
            }
        }
    }

    static func message(of conn: OpaquePointer) -> String {
        String(cString: PQerrorMessage(conn)).trimmingCharacters(in: .whitespacesAndNewlines)
            .replacingOccurrences(of: "\n", with: "; ")
    }

    /// Runs `body` on the connection's queue.
    private func onQueue<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    /// Runs one statement with text parameters (`$1`, `$2`, ...); the rows, each a list of text
    /// values (`nil` for NULL).
    ///
    /// With `prepared`, the statement is prepared on the server the first time this session runs
    /// it and executed by name after that, so the server does not parse and plan it again: for the
    /// statements a worker runs many times a second (claims, deletes). Its plan must then be good
    /// for any parameter values (a generic plan). A session that lost its prepared statements
    /// (the connection was reset, or a pooler discarded them) prepares the statement again.
    @discardableResult
    func query(_ sql: String, _ parameters: [String?] = [], prepared: Bool = false) async throws -> [[String?]] {
        try await onQueue { prepared ? try self.executePrepared(sql, parameters) : try self.queryNow(sql, parameters) }
    }

    private func queryNow(_ sql: String, _ parameters: [String?]) throws -> [[String?]] {
        let result = withParameters(parameters) { values in
            PQexecParams(conn, sql, Int32(parameters.count), nil, values, nil, nil, 0)
        }
        defer { PQclear(result) }
        return try rows(of: result, sql: sql)
    }

    /// `parameters` as C strings for libpq, for the length of `body`.
    private func withParameters(_ parameters: [String?], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> OpaquePointer?) -> OpaquePointer? {
        let cStrings = parameters.map { $0.map { strdup($0) } ?? nil }
        defer { for pointer in cStrings { free(pointer) } }
        let values = cStrings.map { UnsafePointer<CChar>($0) }
        return values.withUnsafeBufferPointer { body($0.baseAddress) }
    }

    /// Executes `sql` as a prepared statement of this session, preparing it first if needed.
    private func executePrepared(_ sql: String, _ parameters: [String?]) throws -> [[String?]] {
        func execute() throws -> OpaquePointer? {
            let name = try statementName(sql, parameterCount: parameters.count)
            return withParameters(parameters) { values in
                PQexecPrepared(conn, name, Int32(parameters.count), values, nil, nil, 0)
            }
        }
        var result = try execute()
        // 26000: the session has no statement of that name (a pooler discarded it): once more.
        if PQstatus(conn) == CONNECTION_OK, sqlState(result) == "26000" {
            PQclear(result)
            prepared[sql] = nil
            result = try execute()
        }
        defer { PQclear(result) }
        return try rows(of: result, sql: sql)
    }

    /// The name `sql` is prepared under in this session, preparing it now if it is not.
    private func statementName(_ sql: String, parameterCount: Int) throws -> String {
        if let name = prepared[sql] { return name }
        // Named by the text's FNV-1a hash: the same in every process, so a statement of that
        // name found in the session (42P05: a pooler's session that another worker used) is
        // this very statement.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in sql.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        let name = "pipelinectl_" + String(hash, radix: 16)
        let result = PQprepare(conn, name, sql, Int32(parameterCount), nil)
        defer { PQclear(result) }
        if sqlState(result) != "42P05" { _ = try rows(of: result, sql: sql) }
        prepared[sql] = name
        return name
    }

    /// The SQLSTATE of a failed result, if it has one.
    private func sqlState(_ result: OpaquePointer?) -> String? {
        result.flatMap { PQresultErrorField($0, Int32(UInt8(ascii: "C"))) }.map { String(cString: $0) }
    }

    private func rows(of result: OpaquePointer?, sql: String) throws -> [[String?]] {
        let status = result.map(PQresultStatus) ?? PGRES_FATAL_ERROR
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            throw failure(result, sql: sql)
        }
        guard let result, status == PGRES_TUPLES_OK else { return [] }
        let rowCount = PQntuples(result), columnCount = PQnfields(result)
        var rows: [[String?]] = []
        rows.reserveCapacity(Int(rowCount))
        for row in 0..<rowCount {
            rows.append((0..<columnCount).map { column in
                PQgetisnull(result, row, column) == 1 ? nil : String(cString: PQgetvalue(result, row, column))
            })
        }
        return rows
    }

    /// A failed statement as a ``PipelineError``: `connect` when the connection is lost (it is
    /// reset, for the next call), `not_found` for a missing table, `io` otherwise.
    private func failure(_ result: OpaquePointer?, sql: String) -> PipelineError {
        let message = (result.flatMap { PQresultErrorMessage($0) }.map { String(cString: $0) } ?? "")
            .trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "\n", with: "; ")
        let text = message.isEmpty ? Self.message(of: conn) : message
        if PQstatus(conn) != CONNECTION_OK {
            reset()
            return PipelineError(.connect, "\(name): the connection was lost: \(text)")
        }
        if sqlState(result) == "42P01" { return PipelineError(.notFound, "\(name): \(text)") }
        return PipelineError(.io, "\(name): \(text)")
    }

    /// Connects again (on `queue`): a new session, with no prepared statements.
    private func reset() {
        PQreset(conn)
        prepared = [:]
    }

    /// `COPY ... FROM STDIN` with `data` (text format) sent in pieces; the number of rows copied.
    func copyIn(_ sql: String, _ chunks: [Data]) async throws -> Int {
        try await onQueue {
            let start = PQexec(self.conn, sql)
            let startStatus = start.map(PQresultStatus) ?? PGRES_FATAL_ERROR
            if startStatus != PGRES_COPY_IN {
                defer { PQclear(start) }
                throw self.failure(start, sql: sql)
            }
            PQclear(start)
            var problem: String?
            for chunk in chunks where problem == nil {
                let sent = chunk.withUnsafeBytes { bytes in
                    PQputCopyData(self.conn, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(bytes.count))
                }
                if sent != 1 { problem = Self.message(of: self.conn) }
            }
            if let problem {
                PQputCopyEnd(self.conn, "pipelinectl: \(problem)")
            } else {
                PQputCopyEnd(self.conn, nil)
            }
            var copied = 0
            var failure: PipelineError?
            while let result = PQgetResult(self.conn) {
                if PQresultStatus(result) == PGRES_COMMAND_OK {
                    copied = Int(String(cString: PQcmdTuples(result))) ?? 0
                } else if failure == nil {
                    failure = self.failure(result, sql: sql)
                }
                PQclear(result)
            }
            if let failure { throw failure }
            return copied
        }
    }

    /// Waits up to `timeout` seconds for a notification on a channel this connection listens to;
    /// whether one came. Notifications that came during earlier statements count at once.
    func waitForNotification(timeout: Double) async throws -> Bool {
        try await onQueue {
            if self.takeNotifications() { return true }
            let socket = PQsocket(self.conn)
            guard socket >= 0 else {
                self.reset()
                throw PipelineError(.connect, "\(self.name): the connection was lost")
            }
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(max(0, timeout) * 1000))
            guard ready > 0 else { return false }
            if PQconsumeInput(self.conn) == 0 {
                let message = Self.message(of: self.conn)
                self.reset()
                throw PipelineError(.connect, "\(self.name): the connection was lost: \(message)")
            }
            return self.takeNotifications()
        }
    }

    /// Drops the notifications received so far; whether there were any.
    private func takeNotifications() -> Bool {
        var any = false
        while let notification = PQnotifies(conn) {
            PQfreemem(notification)
            any = true
        }
        return any
    }
}

extension String {
    /// The text as one value of PostgreSQL's COPY text format (backslash, tab, newline and
    /// carriage return escaped).
    var copyEscaped: String {
        var out = ""
        out.reserveCapacity(utf8.count)
        for character in unicodeScalars {
            switch character {
            case "\\": out += "\\\\"
            case "\t": out += "\\t"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }
}
