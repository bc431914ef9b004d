import Foundation
import MagickKit
import PipelineKit

/// `strip`: removes the source's metadata (EXIF, XMP, IPTC, comments) from this image, whatever the
/// pipeline's `metadata:` keeps, and the ICC profile too with `keep_icc: false`. In one variant's
/// processors, it makes that variant's outputs bare while the others keep what `metadata:` says.
public struct Strip: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "strip",
            summary: "Removes the source's metadata (EXIF, XMP, IPTC), whatever metadata: keeps; keeps the colour profile unless told otherwise.",
            options: [.bool("keep_icc", default: true, doc: "Keep the ICC colour profile.")]),
        make: { options in Strip(keepICC: options.bool("keep_icc")!) })

    let keepICC: Bool
    public var identifier: String { "strip(keep_icc=\(keepICC))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        var stripped = try image.transformed { try $0.strip(keepICC: keepICC) }
        stripped.metadata = nil
        return stripped
    }
}
