import MagickKit

/// `duotone`: maps the image's shadows to one colour and its highlights to another.
public struct Duotone: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "duotone",
            summary: "Maps shadows to one colour and highlights to another (a two-colour print look).",
            options: [
                .color("dark", default: "#1d2b53", doc: "Colour of the shadows.").example("\"#202040\""),
                .color("light", default: "#ffcc66", doc: "Colour of the highlights.").example("white"),
            ])
    ) { options in Duotone(dark: options.string("dark")!, light: options.string("light")!) }

    let dark: String
    let light: String

    /// `dark` and `light` were checked at `validate` (the `.color` kind): the factory needs no check.
    init(dark: String, light: String) {
        self.dark = dark
        self.light = light
    }

    /// Part of cache keys: changes exactly when the output would.
    public var identifier: String { "duotone(\(dark),\(light))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { wand in
            try wand.grayscale()
            try wand.levelColors(dark: dark, light: light)
        }
    }
}
