import Foundation

/// What a response says about caching it: its validators and its freshness.
///
/// The HTTP loader fills it from `ETag`, `Last-Modified`, `Cache-Control`, `Expires`, `Date` and
/// `Age`; other loaders describe their sources in the same terms (a local file is validated by its
/// size and modification time on every use; a `data:` URL never changes). The data cache decides
/// from it, under its `policy`, whether an entry may be stored, is fresh, or must be revalidated.
public struct CacheDirectives: Sendable, Codable, Equatable {
    /// The entity tag, sent back as `If-None-Match` when revalidating.
    public var etag: String?
    /// The `Last-Modified` date as sent, sent back as `If-Modified-Since`.
    public var lastModified: String?
    /// Seconds the response stays fresh after it was received, when the response says so
    /// (`Cache-Control: max-age` less `Age`, or `Expires` less `Date`).
    public var maxAge: Double?
    /// `Cache-Control: no-store`: never kept.
    public var noStore = false
    /// `Cache-Control: no-cache` (or `must-revalidate` with no lifetime): kept, but validated before
    /// every use.
    public var noCache = false
    /// The source never changes (a `data:` URL, `Cache-Control: immutable`).
    public var immutable = false
    /// The source is checked on every use whatever the policy, because checking costs almost
    /// nothing (a local file: its size and modification time, carried as `etag`).
    public var revalidateAlways = false

    public init(etag: String? = nil, lastModified: String? = nil, maxAge: Double? = nil,
                noStore: Bool = false, noCache: Bool = false, immutable: Bool = false, revalidateAlways: Bool = false) {
        self.etag = etag
        self.lastModified = lastModified
        self.maxAge = maxAge
        self.noStore = noStore
        self.noCache = noCache
        self.immutable = immutable
        self.revalidateAlways = revalidateAlways
    }

    /// Whether a stale entry can be checked with a conditional request instead of refetched.
    public var canRevalidate: Bool { etag != nil || lastModified != nil }

    /// Reads the caching headers of an HTTP response (names lowercased).
    public init(httpHeaders headers: [String: String]) {
        etag = headers["etag"]
        lastModified = headers["last-modified"]
        let age = headers["age"].flatMap { Double($0.trimmingCharacters(in: .whitespaces)) } ?? 0
        var maxAge: Double?
        for part in (headers["cache-control"] ?? "").split(separator: ",") {
            let directive = part.trimmingCharacters(in: .whitespaces).lowercased()
            let pieces = directive.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")) }
            switch pieces[0] {
            case "no-store": noStore = true
            case "no-cache": noCache = true
            case "immutable": immutable = true
            case "max-age": maxAge = pieces.count > 1 ? Double(pieces[1]).map { Swift.max(0, $0) } : 0
            default: break
            }
        }
        if let maxAge {
            self.maxAge = Swift.max(0, maxAge - age)
        } else if let expiresText = headers["expires"] {
            // An Expires that is not a date (often "0" or "-1") means already expired.
            if let expires = HTTPDate.parse(expiresText) {
                let date = headers["date"].flatMap(HTTPDate.parse) ?? Date()
                self.maxAge = Swift.max(0, expires.timeIntervalSince(date) - age)
            } else {
                self.maxAge = 0
            }
        }
    }

    /// The directives of a 304 answer merged into those stored: the answer's freshness, and its
    /// validators where it sent any.
    public func updated(by answer: CacheDirectives) -> CacheDirectives {
        var merged = answer
        merged.etag = answer.etag ?? etag
        merged.lastModified = answer.lastModified ?? lastModified
        return merged
    }
}

/// HTTP dates (RFC 9110: IMF-fixdate, and the obsolete RFC 850 and asctime forms).
public enum HTTPDate {
    private static let formats = ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"]

    public static func parse(_ text: String) -> Date? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        for format in formats {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: trimmed) { return date }
        }
        return nil
    }

    public static func format(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
