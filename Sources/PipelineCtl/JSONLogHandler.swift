import Foundation
import Logging
import PipelineHummingbird
import PipelineService

/// swift-log lines as JSON objects, one per line on stderr (`--log-format json`), for log
/// collectors: `{"time", "level", "label", "message", ...metadata}`. With traces on, the
/// metadata provider adds the task's `trace_id` and `span_id`.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        write(level: event.level, message: event.message, metadata: event.metadata)
    }

    func log(level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?,
             source: String, file: String, function: String, line: UInt) {
        write(level: level, message: message, metadata: explicit)
    }

    private func write(level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?) {
        var object: [String: String] = [:]
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        for (key, value) in merged.merging(explicit ?? [:], uniquingKeysWith: { $1 }) { object[key] = "\(value)" }
        object["time"] = Date().formatted(.iso8601)
        object["level"] = level.rawValue
        object["label"] = label
        object["message"] = message.description
        var line = JSONLine()
        for (key, value) in object { line.add(key, value) }
        FileHandle.standardError.write(Data((line.text + "\n").utf8))
    }
}

/// `--log-format`.
enum LogFormat: String, CaseIterable {
    case text, json
}
