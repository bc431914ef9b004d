import Foundation

/// Where a pipeline's sources may come from (`serve.sources`), and the one function that decides
/// whether a source is inside.
///
/// The decision is made on what a loader will open, never on the text as sent:
/// - percent-encoded dots, slashes, backslashes, percent signs and NULs are refused outright
///   (another layer would decode them again: `%252e%252e` is `..` two decodings later);
/// - a URL is compared by its parts (scheme, host, port, path), its path with the dot segments
///   removed as RFC 3986 and libcurl remove them, and with no user name before the host;
/// - a local path (a plain path or a `file://` URL, read as the `file` loader reads it) is
///   compared after `realpath` (every symlink resolved) against roots that went through
///   `realpath` too; a path whose link cannot be resolved is refused, so a missing file outside
///   answers as an existing one does;
/// - loaders check again on what they open: the `file` loader the descriptor it opened, the
///   `http` loader every redirect hop (``admitsRedirect(to:)``).
///
/// `pipelinectl serve`, `pipelinectl sign` and the loaders all ask this type; nothing else
/// decides. An empty boundary admits any URL (the loaders' own guards still apply), and no
/// local path: a local file is served only from a directory listed.
public struct SourceBoundary: Sendable, Hashable {
    /// One allowed prefix, parsed.
    struct Root: Sendable, Hashable {
        enum Place: Sendable, Hashable {
            /// A local directory: its lexical form and its `realpath` (equal when it has no links).
            case directory(lexical: String, resolved: String)
            /// `scheme://host[:port][/path]`; `port` nil with `anyPort` for a prefix ending at `:`.
            case url(scheme: String, host: String, port: Int?, anyPort: Bool, path: String)
            /// A scheme alone (`data:`).
            case scheme(String)
        }
        let text: String
        let place: Place
    }

    let roots: [Root]

    /// The prefixes as the pipeline file lists them. Local roots are resolved (`realpath`) now:
    /// a directory that is a link is followed once, here, by the operator's choice.
    public init(_ prefixes: [String]) {
        roots = prefixes.compactMap(Self.root)
    }

    /// Whether every URL is admitted (no prefix listed). Local paths never are without a
    /// directory listed.
    public var isOpen: Bool { roots.isEmpty }

    /// The prefixes as given.
    public var prefixes: [String] { roots.map(\.text) }

    /// Admits `source` (as a request names it, decoded once) or throws a `source_not_allowed`
    /// error saying why. A local path that is inside but does not exist is admitted: the loader
    /// answers `not_found`, as it would for any missing file inside.
    public func check(_ source: String) throws {
        if let refusal = refusal(for: source) { throw PipelineError(.sourceNotAllowed, refusal) }
    }

    /// Why `source` is refused, or `nil` when it is admitted.
    public func refusal(for source: String) -> String? {
        if Source.scheme(of: source) != "data", let encoded = Self.encodedSeparator(in: source) {
            return "the source contains '\(encoded)', an encoded dot, slash, backslash or percent sign; name the path plainly"
        }
        if source.contains(where: { $0 == "\0" || $0.isNewline }) { return "the source contains a line break or NUL" }
        switch Source.urlScheme(of: source) ?? Source.scheme(of: source) {
        case nil, "file"?:
            return localRefusal(source)
        case let scheme? where !source.contains("://"):
            // `data:` and the like: admitted only by a prefix that is that scheme alone.
            return isOpen || roots.contains { $0.place == .scheme(scheme) } ? nil : "\(scheme): sources are not under any prefix of serve.sources"
        case let scheme?:
            if source.contains("\\") { return "the source contains a backslash" }
            guard !isOpen else { return nil }
            guard let parts = Self.urlParts(source) else { return "the source is not a URL that can be checked against serve.sources" }
            if parts.hasUser { return "the source names a user before its host" }
            guard roots.contains(where: { $0.admits(scheme: scheme, parts) }) else {
                return "\(Self.display(scheme, parts)) is not under any prefix of serve.sources (\(prefixes.joined(separator: ", ")))"
            }
            return nil
        }
    }

    /// Whether a redirect from a source inside to `url` (absolute) stays inside. The loaders
    /// check every hop before they follow it.
    public func admitsRedirect(to url: String) -> Bool {
        guard !isOpen else { return true }
        guard let scheme = Source.urlScheme(of: url), scheme != "file" else { return false }
        return refusal(for: url) == nil
    }

    /// Whether `path`, the resolved path of a file a loader has opened (from `/proc/self/fd`),
    /// lies under a local root. Loaders call it before they read a byte.
    public func admitsOpened(path: String) -> Bool {
        roots.contains { root in
            if case .directory(_, let resolved) = root.place { return Self.isUnder(path, resolved) }
            return false
        }
    }

    // MARK: - Local paths

    private func localRefusal(_ source: String) -> String? {
        let local = roots.filter { if case .directory = $0.place { return true } else { return false } }
        let denied = "local paths are served only under a directory listed in serve.sources"
        guard !local.isEmpty else { return denied }
        // The path the file loader opens, as it reads it (a file:// URL decoded once more).
        guard let path = Source(text: source, index: 1).localPath, path.hasPrefix("/") else {
            return "the source is not an absolute local path"
        }
        let lexical = Self.removingDotSegments(path)
        guard local.contains(where: { root in
            if case .directory(let rootLexical, _) = root.place { return Self.isUnder(lexical, rootLexical) }
            return false
        }) else { return denied }
        // The deepest part that exists, resolved as the kernel will resolve it when the loader
        // opens it (a `..` after a link leaves from where the link points): every link followed.
        var probe = path
        var info = stat()
        while lstat(probe, &info) != 0 {
            guard errno == ENOENT || errno == ENOTDIR, probe != "/" else { return denied }
            probe = (probe as NSString).deletingLastPathComponent
        }
        guard let resolved = Self.realpath(probe), admitsOpened(path: resolved) else { return denied }
        return nil
    }

    // MARK: - Parsing

    /// The first encoded dot (`%2e`), slash (`%2f`), backslash (`%5c`), percent sign (`%25`) or
    /// NUL (`%00`) before the query, as written; `nil` when there is none.
    static func encodedSeparator(in source: String) -> String? {
        let path = source.prefix { $0 != "?" && $0 != "#" }
        var index = path.startIndex
        while let percent = path[index...].firstIndex(of: "%") {
            let code = path[path.index(after: percent)...].prefix(2)
            if ["2e", "2f", "5c", "25", "00"].contains(code.lowercased()) { return "%" + code }
            index = path.index(after: percent)
        }
        return nil
    }

    /// A URL's parts: host (lower case), port (as written), path with dot segments removed.
    struct URLParts {
        var host: String
        var port: Int?
        var path: String
        var hasUser: Bool
    }

    static func urlParts(_ text: String) -> URLParts? {
        guard let range = text.range(of: "://") else { return nil }
        let afterScheme = text[range.upperBound...]
        let authorityEnd = afterScheme.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? afterScheme.endIndex
        var authority = afterScheme[..<authorityEnd]
        let rawPath = afterScheme[authorityEnd...].prefix { $0 != "?" && $0 != "#" }
        var hasUser = false
        if let at = authority.lastIndex(of: "@") {
            hasUser = true
            authority = authority[authority.index(after: at)...]
        }
        var host = Substring(authority)
        var port: Int?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[...close]
            let rest = authority[authority.index(after: close)...]
            if rest.hasPrefix(":") {
                guard let number = Int(rest.dropFirst()) else { return nil }
                port = number
            } else if !rest.isEmpty { return nil }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            let digits = authority[authority.index(after: colon)...]
            if !digits.isEmpty {
                guard let number = Int(digits), (0...65535).contains(number) else { return nil }
                port = number
            }
        }
        guard !host.isEmpty else { return nil }
        var lowered = host.lowercased()
        if lowered.hasSuffix("."), !lowered.hasPrefix("[") { lowered.removeLast() }  // `example.com.` is example.com
        return URLParts(host: lowered, port: port, path: removingDotSegments(rawPath.isEmpty ? "/" : String(rawPath)), hasUser: hasUser)
    }

    package static func defaultPort(_ scheme: String) -> Int? {
        switch scheme {
        case "http": return 80
        case "https": return 443
        default: return nil
        }
    }

    static func display(_ scheme: String, _ parts: URLParts) -> String {
        scheme + "://" + parts.host + (parts.port.map { ":\($0)" } ?? "") + parts.path
    }

    static func root(_ text: String) -> Root? {
        if text.hasPrefix("/") {
            let lexical = removingDotSegments(text)
            return Root(text: text, place: .directory(lexical: lexical, resolved: realpath(lexical) ?? lexical))
        }
        if text.lowercased().hasPrefix("file://") {
            guard let path = Source(text: text, index: 1).localPath else { return nil }
            return root(path)
        }
        guard let scheme = Source.urlScheme(of: text) else {
            // `data:` and the like: the scheme alone.
            guard text.hasSuffix(":"), Source.scheme(of: text + "//") != nil else { return nil }
            return Root(text: text, place: .scheme(String(text.dropLast()).lowercased()))
        }
        let anyPort = text.hasSuffix(":") && !text.hasSuffix("://")
        guard let parts = urlParts(anyPort ? String(text.dropLast()) : text) else { return nil }
        // A prefix without a path, or ending at its host, admits every path of that origin.
        let rest = text[text.range(of: "://")!.upperBound...]
        let path = rest.contains("/") ? parts.path : "/"
        return Root(text: text, place: .url(scheme: scheme, host: parts.host, port: parts.port, anyPort: anyPort, path: path))
    }

    /// `path` with `.` and `..` segments removed (RFC 3986 section 5.2.4), a trailing slash kept.
    public static func removingDotSegments(_ path: String) -> String {
        var output: [Substring] = []
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        for (index, segment) in segments.enumerated() {
            let last = index == segments.count - 1
            switch segment {
            case ".":
                if last { output.append("") }
            case "..":
                if output.count > 1 { output.removeLast() }
                if last { output.append("") }
            default:
                output.append(segment)
            }
        }
        let joined = output.joined(separator: "/")
        return path.hasPrefix("/") && !joined.hasPrefix("/") ? "/" + joined : joined
    }

    /// Whether `path` is `directory` or inside it (by whole segments).
    static func isUnder(_ path: String, _ directory: String) -> Bool {
        let base = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        if base.isEmpty { return path.hasPrefix("/") }
        return path == base || path.hasPrefix(base + "/")
    }

    static func realpath(_ path: String) -> String? {
        guard let resolved = Foundation.realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}

extension SourceBoundary.Root {
    func admits(scheme: String, _ parts: SourceBoundary.URLParts) -> Bool {
        switch place {
        case .directory: return false
        case .scheme(let only): return only == scheme
        case .url(let rootScheme, let host, let port, let anyPort, let path):
            guard rootScheme == scheme, host == parts.host else { return false }
            if !anyPort {
                let wanted = port ?? SourceBoundary.defaultPort(scheme)
                guard (parts.port ?? SourceBoundary.defaultPort(scheme)) == wanted else { return false }
            }
            if path == "/" { return true }
            return path.hasSuffix("/") ? parts.path.hasPrefix(path) : SourceBoundary.isUnder(parts.path, path)
        }
    }
}
