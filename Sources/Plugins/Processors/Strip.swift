import Foundation
import MagickKit
import PipelineKit

/// `strip`: removes metadata (EXIF, XMP, IPTC, comments), keeping the ICC profile unless told otherwise.
public struct Strip: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "strip",
            summary: "Removes metadata (EXIF, XMP, IPTC, comments); keeps the colour profile unless told otherwise.",
            options: [.bool("keep_icc", default: true, doc: "Keep the ICC colour profile.")]),
        make: { options in Strip(keepICC: options.bool("keep_icc")!) })

    let keepICC: Bool
    public var identifier: String { "strip(keep_icc=\(keepICC))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.strip(keepICC: keepICC) }
    }
}
