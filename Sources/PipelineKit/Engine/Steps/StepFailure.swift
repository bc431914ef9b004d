import Foundation

/// How every step of an item turns what went wrong into the item's failure, once, at the step's
/// boundary: a ``PipelineError`` keeps its kind and gets the step's stage (and plugin); any other
/// error a plugin throws becomes the step's `kind`, with the plugin's own description.
enum StepFailure {
    static func classify(_ error: any Error, stage: StageName, kind: ErrorKind, plugin: String? = nil) -> PipelineError {
        if var failure = error as? PipelineError {
            if failure.stage == nil { failure.stage = stage }
            if failure.plugin == nil { failure.plugin = plugin }
            return failure
        }
        if error is CancellationError { return PipelineError(.cancelled, "cancelled", stage: stage, plugin: plugin) }
        return PipelineError(kind, String(describing: error), stage: stage, plugin: plugin)
    }

    /// `classify`, with the message prefixed by the variant it happened in (when it has a name).
    static func classify(_ error: any Error, stage: StageName, kind: ErrorKind, plugin: String? = nil,
                         variant: RunnableVariant) -> PipelineError {
        named(classify(error, stage: stage, kind: kind, plugin: plugin), variant)
    }

    /// Prefixes a failure's message with the variant it happened in.
    static func named(_ error: PipelineError, _ variant: RunnableVariant) -> PipelineError {
        guard let name = variant.name else { return error }
        var copy = error
        copy.message = "variant '\(name)': " + error.message
        return copy
    }
}

/// Runs `body`, a wait for a shared resource (a load slot, decode memory), with the item's clock
/// paused: an item's time limit counts its own work, not its turn.
func waitingTurn<T>(_ body: () async throws -> T) async throws -> T {
    let wait = StageContext.current?.clock?.beginWait()
    defer { wait?.end() }
    return try await body()
}
