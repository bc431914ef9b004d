// MagickKit: ImageMagick (MagickWand 6, Q16) for pipeline stages. The decoder, processors and
// encoders import it; the engine, the config and the registry (PipelineKit) do not.
//
// A plugin that touches pixels imports MagickKit alone: it re-exports PipelineKit, so the stage
// protocols, `PipelineImage`, `Plugin` and `PipelineError` come with it. A plugin that never touches
// pixels (a loader, a cache) imports PipelineKit.
@_exported import PipelineKit
