import Foundation
import PipelineKit

/// `file`: a list of sources in a local file (`urls.txt`, `file:///data/urls.txt`), or on
/// standard input (`-`): one URL or path per line, `#` comments and blank lines skipped, read
/// lazily in 64 KiB chunks so that a list of millions takes no more memory than a short one.
/// Relative paths in it resolve against the file's directory.
public enum FileList {
    public static let plugin = Plugin.list(
        PluginSpec(name: "file",
                   summary: "Reads sources from a local file, one per line (relative paths resolve against its directory), or from standard input ('-').",
                   options: []),
        schemes: ["", "file"]
    ) { options in
        let url = options.string("url") ?? "-"
        guard Source.urlScheme(of: url) == "file" else { return SourceList(path: url) }
        guard let path = URL(string: url)?.path, !path.isEmpty else {
            throw PipelineError(.invalidSource, "'\(url)' is not a file:// URL of a local file")
        }
        return SourceList(path: path)
    }
}
