import Foundation

/// ImageMagick's side of `pipelinectl test`: inputs from its built-in generators (`rose:`,
/// `gradient:red-blue`, `plasma:`), and outputs read back to check their size and alpha.
public struct MagickTestImaging: PipelineTestImaging {
    public init() {}

    public func makeInput(_ spec: String, size: PixelSize?) throws -> Data {
        let wand = Wand()
        try wand.readBuiltIn(spec, size: size.map { ($0.width, $0.height) })
        return try wand.encode(format: "PNG")
    }

    public func inspect(_ data: Data, format: String) -> (width: Int, height: Int, hasAlpha: Bool)? {
        let wand = Wand()
        guard (try? wand.read(data, format: format)) != nil else { return nil }
        return (wand.width, wand.height, wand.hasAlpha)
    }
}
