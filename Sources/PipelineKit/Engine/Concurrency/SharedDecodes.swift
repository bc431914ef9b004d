import Synchronization
import Tracing

/// One decode for every item that received one shared load (the service's sizes of one source
/// asked for at once), planned for the largest of them.
///
/// When an item asks for its source's load it notes what it will decode (``Need``: its decoder,
/// with options, and its ``DecodeHint``). Every item the load reaches gets the same notes and the
/// same `SharedDecodes`, made by the load. Items with the same decoder decode once, with the hint
/// that covers all of them (``DecodeHint/covering(_:)``): the first to get there decodes, the
/// others wait for its image and run only their own processors on it. Which item comes first does
/// not change what is decoded, so nothing depends on timing but which requests shared the load.
///
/// The decoded image holds its decode-memory reservation (``DecodedImage``) until the last item
/// using it is done. The group keeps the image only until every item the load reached has come
/// for it: a load that reached one item keeps nothing, as before.
///
/// The decode's failure reaches every item of the group (the same bytes fail the same way). An
/// owner that leaves before decoding (cancelled while waiting for memory or a worker) sends the
/// items waiting for it back, and one of them decodes.
final class SharedDecodes: Sendable {
    /// What one item will decode: noted with its load.
    struct Need: Sendable {
        /// Items decode together only with the same group: the decoder and its options (and what
        /// the image must carry).
        let group: String
        let hint: DecodeHint
    }

    /// One decode, from its registration on.
    final class Decode: @unchecked Sendable {
        // Only touched under `SharedDecodes.state`'s lock.
        var result: Result<DecodedImage, any Error>?
        var waiters: [UInt64: UnsafeContinuation<DecodedImage, any Error>] = [:]
        var published = false
    }

    /// What an item does about its decode.
    enum Turn {
        /// Decode, then ``publish(_:_:)`` the image (or the failure), and ``close(_:)`` once done.
        case decode(Decode)
        /// Use the image of this decode once it is made (``image(of:)``).
        case join(Decode)
        /// The decode is done: its image, or its failure.
        case done(Result<DecodedImage, any Error>)
    }

    /// The owner left before its decode ran: its joiners look again.
    struct OwnerLeft: Error {}

    private struct State: ~Copyable {
        var needs: [Need]?
        var decodes: [String: Decode] = [:]
        var arrived = 0
        var nextID: UInt64 = 0
        var allArrived: Bool { arrived >= (needs?.count ?? 1) }
    }
    private let state = Mutex(State())

    init() {}

    /// The notes of every item the load reached (the same for all; the first call counts).
    func settle(_ needs: [Need]) {
        state.withLock { state in if state.needs == nil { state.needs = needs } }
    }

    /// The hint to decode with for `need` (one of the settled needs): the one covering every
    /// need of its group.
    func hint(for need: Need) -> DecodeHint {
        let group = state.withLock { state in state.needs?.filter { $0.group == need.group }.map(\.hint) ?? [] }
        return group.isEmpty ? need.hint : DecodeHint.covering(group)
    }

    /// The decode of `group`: done, under way (to join), or registered now for the caller to run.
    /// `arriving`: the caller's first turn, which counts it as come (once every item of the load
    /// has, done images are not kept); not when it looks again after an owner left.
    func turn(_ group: String, arriving: Bool = true) -> Turn {
        state.withLock { state in
            if arriving { state.arrived += 1 }
            let turn: Turn
            if let found = state.decodes[group], !found.published || found.result != nil {
                turn = found.result.map { .done($0) } ?? .join(found)
            } else {
                // None, or one done whose image is no longer kept: the caller decodes.
                let decode = Decode()
                state.decodes[group] = decode
                turn = .decode(decode)
            }
            if state.allArrived { for decode in state.decodes.values where decode.published { decode.result = nil } }
            return turn
        }
    }

    /// Gives the decoded image (or the failure) to every item waiting for it, and keeps it for
    /// items of the load still to come. Only the first call counts.
    func publish(_ decode: Decode, _ result: Result<DecodedImage, any Error>) {
        let waiting = state.withLock { state -> [UnsafeContinuation<DecodedImage, any Error>] in
            guard !decode.published else { return [] }
            decode.published = true
            if case .failure(let error) = result, error is OwnerLeft {
                state.decodes = state.decodes.filter { $0.value !== decode }
            } else if !state.allArrived {
                decode.result = result
            }
            defer { decode.waiters = [:] }
            return Array(decode.waiters.values)
        }
        for continuation in waiting { continuation.resume(with: result) }
    }

    /// The owner is done with `decode`: one never published sends its waiters back (``OwnerLeft``).
    func close(_ decode: Decode) { publish(decode, .failure(OwnerLeft())) }

    /// The image of `decode`, once published; throws its failure, ``OwnerLeft``, or
    /// `CancellationError` when the caller is cancelled first.
    func image(of decode: Decode) async throws -> DecodedImage {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<DecodedImage, any Error>) in
                let now: Result<DecodedImage, any Error>? = state.withLock { state in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if let result = decode.result { return result }
                    if decode.published { return .failure(OwnerLeft()) }
                    decode.waiters[id] = continuation
                    return nil
                }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            let continuation = state.withLock { _ in decode.waiters.removeValue(forKey: id) }
            continuation?.resume(throwing: CancellationError())
        }
    }

    /// Items waiting for another's decode now (for tests).
    var waiting: Int { state.withLock { $0.decodes.values.reduce(0) { $0 + $1.waiters.count } } }
}

extension DecodeHint {
    /// The hint that serves every one of `hints` with one decode: no target when one has none, else
    /// the largest box on each side, fit only when every one fits, and what any wants read.
    static func covering(_ hints: [DecodeHint]) -> DecodeHint {
        guard let first = hints.first else { return DecodeHint() }
        var covering = first
        for hint in hints.dropFirst() {
            if let a = covering.targetSize, let b = hint.targetSize {
                covering.targetSize = PixelSize(width: max(a.width, b.width), height: max(a.height, b.height))
            } else {
                covering.targetSize = nil
            }
            covering.fit = covering.fit && hint.fit
            covering.wantsSourceFacts = covering.wantsSourceFacts || hint.wantsSourceFacts
            covering.wantsMetadata = covering.wantsMetadata || hint.wantsMetadata
            covering.wantsSourceBytes = covering.wantsSourceBytes || hint.wantsSourceBytes
        }
        if covering.targetSize == nil { covering.fit = false }
        return covering
    }
}

/// A decoded image shared by the items that use it; the decode-memory reservation it was made
/// under is given back when the last of them lets it go.
final class DecodedImage: Sendable {
    let image: PipelineImage
    /// How long the decode took, in milliseconds.
    let milliseconds: Double
    /// The decode's span, which the items that share the image link to.
    let trace: ServiceContext?
    private let reservation: DecodeReservation

    init(_ image: PipelineImage, milliseconds: Double, holding reservation: DecodeReservation, trace: ServiceContext? = nil) {
        self.image = image
        self.milliseconds = milliseconds
        self.trace = trace
        self.reservation = reservation
        reservation.hold()
    }

    deinit { reservation.release() }
}

/// Bytes of the decode memory budget taken for one decode: given back by the decode's owner when
/// no image was made (the decode failed, or never ran), else by the image when its last user is done.
final class DecodeReservation: Sendable {
    private let budget: MemoryBudget
    private let bytes: Int
    /// 0: held by the decode's owner; 1: held by the image; 2: given back.
    private let state = Atomic<Int>(0)

    init(_ budget: MemoryBudget, bytes: Int) {
        self.budget = budget
        self.bytes = bytes
    }

    /// The image holds it from now on.
    func hold() { _ = state.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing) }

    /// Gives it back unless an image holds it.
    func releaseUnlessHeld() {
        if state.compareExchange(expected: 0, desired: 2, ordering: .acquiringAndReleasing).exchanged { budget.release(bytes) }
    }

    /// Gives it back (the image is gone).
    func release() {
        if state.compareExchange(expected: 1, desired: 2, ordering: .acquiringAndReleasing).exchanged { budget.release(bytes) }
    }
}
