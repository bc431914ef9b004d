import Foundation
import PipelineKit
import Synchronization

/// Recent `/info` answers of sources whose content is pinned, answered again without the engine:
/// a URL with a version (`v=`: a new upload is a new URL) or a local file whose size and
/// modification time are what they were. Facts are small and asked for often (a page's layout
/// wants each image's size and placeholder); an image answer keeps going through the data cache.
/// Other sources (an origin's URL without a version) are not kept here: their facts come from the
/// data cache, revalidated as the thumbnails are.
final class InfoMemo: Sendable {
    struct Entry: Sendable {
        let version: String
        let answer: ServeAnswer
    }

    private let state = Mutex<(entries: [String: Entry], order: [String])>(([:], []))
    let capacity: Int

    /// At most `capacity` answers (each a few KB of JSON), the oldest dropped first.
    init(capacity: Int = 4096) { self.capacity = capacity }

    /// What pins `source`'s content now: its `v` parameter, or a local file's size and
    /// modification time; `nil` when nothing does.
    static func version(of source: Source, pinned: String?) -> String? {
        if let pinned { return "v:" + pinned }
        guard source.scheme == nil || source.scheme == "file", let path = source.localPath else { return nil }
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return "f:\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
    }

    func answer(_ key: String, version: String) -> ServeAnswer? {
        state.withLock { $0.entries[key].flatMap { $0.version == version ? $0.answer : nil } }
    }

    func keep(_ key: String, version: String, _ answer: ServeAnswer) {
        state.withLock { state in
            if state.entries.updateValue(Entry(version: version, answer: answer), forKey: key) == nil { state.order.append(key) }
            while state.order.count > capacity { state.entries[state.order.removeFirst()] = nil }
        }
    }
}
