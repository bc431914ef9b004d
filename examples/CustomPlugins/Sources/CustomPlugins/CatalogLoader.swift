import Foundation
import PipelineKit

/// `catalog`: loads `catalog://SKU` sources from a directory of product images, where the image of
/// a SKU is `ROOT/SKU.jpg` (or another of `extensions`). The engine picks it for `catalog://` lines
/// because the plugin declares that scheme.
public struct CatalogLoader: DataLoading {
    public static let plugin = Plugin.loader(
        PluginSpec(
            name: "catalog",
            summary: "Loads catalog://SKU from a directory of product images (ROOT/SKU.jpg).",
            options: [
                .path("root", required: true, doc: "Directory holding one image per SKU.").example("./catalog"),
                .list("extensions", of: .string, default: [.string("jpg"), .string("png"), .string("webp")],
                      doc: "File extensions tried, in order."),
            ]),
        schemes: ["catalog"]
    ) { options in
        CatalogLoader(root: options.string("root")!, extensions: (options.list("extensions") ?? []).map(\.description))
    }

    let root: String
    let extensions: [String]

    /// Local files: not worth copying into the data cache.
    public var usesDataCache: Bool { false }

    public func load(_ source: Source) async throws -> LoadedData {
        let sku = String(source.text.dropFirst("catalog://".count))
        // Untrusted input: a SKU is letters, digits, '-' and '_' only, so it cannot leave ROOT.
        guard !sku.isEmpty, sku.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw PipelineError(.invalidSource, "'\(sku)' is not a SKU (letters, digits, '-' and '_')")
        }
        let root = self.root, extensions = self.extensions
        // Blocking file I/O goes to the engine's I/O threads, never the cooperative pool.
        return try await WorkerPool.io.run {
            for ext in extensions {
                let path = "\(root)/\(sku).\(ext)"
                if let data = FileManager.default.contents(atPath: path) { return LoadedData(data: data) }
            }
            throw PipelineError(.notFound, "no image for SKU \(sku) in \(root)")
        }
    }
}
