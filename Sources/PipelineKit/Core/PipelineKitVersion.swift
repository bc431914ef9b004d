/// The version of PipelineKit, following Semantic Versioning: within a major version the public
/// API only grows (docs/library.md, "The API is a promise"). `pipelinectl --version` prints it.
public enum PipelineKitVersion {
    /// `MAJOR.MINOR.PATCH`.
    public static let current = "0.4.0"
}
