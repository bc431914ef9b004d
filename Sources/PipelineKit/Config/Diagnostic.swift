import Foundation

/// A problem found in a pipeline file, at a position a person can go to.
public struct Diagnostic: Sendable, Error, Equatable, Codable, CustomStringConvertible {
    public enum Severity: String, Sendable, Codable { case error, warning }

    public let severity: Severity
    /// The file as the user named it.
    public let file: String
    /// 1-based line.
    public let line: Int
    /// 1-based column (in Unicode scalars, as libyaml counts).
    public let column: Int
    public let message: String

    public init(_ severity: Severity = .error, file: String, line: Int, column: Int, message: String) {
        self.severity = severity
        self.file = file
        self.line = line
        self.column = column
        self.message = message
    }

    /// `FILE:LINE:COLUMN: error: MESSAGE`
    public var description: String { "\(file):\(line):\(column): \(severity.rawValue): \(message)" }

    /// ``description`` followed by the source line and a caret under the column, as compilers print.
    public func rendered(source: String?) -> String {
        guard let source, line >= 1 else { return description }
        let lines = source.split(separator: "\n", omittingEmptySubsequences: false)
        guard line <= lines.count else { return description }
        let text = String(lines[line - 1]).replacingOccurrences(of: "\r", with: "")
        let prefix = text.unicodeScalars.prefix(max(0, column - 1))
        let pad = String(prefix.map { $0 == "\t" ? "\t" : " " })
        return "\(description)\n\(text)\n\(pad)^"
    }
}

/// A list of diagnostics thrown as one error: what `load` throws for an invalid pipeline.
public struct PipelineValidationError: Error, Sendable, CustomStringConvertible {
    public let diagnostics: [Diagnostic]
    /// The file's text, for rendering carets; `nil` when it could not be read.
    public let source: String?
    public var description: String { diagnostics.map(\.description).joined(separator: "\n") }
}

/// Suggesting the name a person probably meant.
public enum Suggest {
    /// The candidate closest to `word` by edit distance, when it is close enough to be a typo.
    public static func nearest(_ word: String, in candidates: [String]) -> String? {
        let lower = word.lowercased()
        var best: (String, Int)?
        for candidate in candidates {
            let distance = editDistance(lower, candidate.lowercased())
            if best == nil || distance < best!.1 { best = (candidate, distance) }
        }
        guard let (name, distance) = best else { return nil }
        let allowed = max(1, min(3, (max(word.count, name.count) + 2) / 4))
        return distance <= allowed ? name : nil
    }

    /// Levenshtein distance, counting a swap of neighbours as one edit.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var d = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { d[i][0] = i }
        for j in 0...b.count { d[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
                }
            }
        }
        return d[a.count][b.count]
    }

    /// `; did you mean 'quality'?` or `; expected one of: a, b, c` (empty when there is nothing to say).
    public static func hint(for word: String, in candidates: [String], listing: Bool = true) -> String {
        if let near = nearest(word, in: candidates) { return "; did you mean '\(near)'?" }
        guard listing, !candidates.isEmpty else { return "" }
        return "; expected one of: " + candidates.joined(separator: ", ")
    }
}
