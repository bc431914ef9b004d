import Foundation
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

/// Work shared by several callers: one run for all, each caller free to leave, and the work
/// cancelled when the last one has left.
@Suite struct SharedWorkTests {
    let source = Source(text: "scripted://a", index: 1)

    @Test func callersWhileItRunsShareOneRun() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .hold(Data("1x1".utf8)))
        let work = SharedWork<Int>()
        let callers = (0..<5).map { _ in
            Task { try await work.run("a") { try await loader.load(source).data.count } }
        }
        while work.subscribers("a") < 5 { await Task.yield() }
        loader.release("a")
        let shared = try await callers.asyncMap { try await $0.value.shared }
        #expect(loader.calls("a") == 1)
        #expect(shared.filter { !$0 }.count == 1)  // one started it, four shared it
    }

    @Test func oneCallerLeavingDoesNotStopTheOthers() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .hold(Data("1x1".utf8)))
        let work = SharedWork<Int>()
        let leaving = Task { try await work.run("a") { try await loader.load(source).data.count } }
        let staying = Task { try await work.run("a") { try await loader.load(source).data.count } }
        while work.subscribers("a") < 2 { await Task.yield() }
        leaving.cancel()
        await #expect(throws: CancellationError.self) { try await leaving.value }  // at once, not when the work ends
        #expect(work.subscribers("a") == 1)
        loader.release("a")
        #expect(try await staying.value.0 == 3)
        #expect(loader.log.count("cancelled a") == 0)
    }

    @Test func theLastCallerLeavingCancelsTheWork() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .hold(Data("1x1".utf8)))
        let work = SharedWork<Int>()
        let callers = (0..<3).map { _ in Task { try await work.run("a") { try await loader.load(source).data.count } } }
        while work.subscribers("a") < 3 { await Task.yield() }
        await loader.log.wait(for: "started a")
        for caller in callers { caller.cancel() }
        #expect(await loader.log.wait(for: "cancelled a"))
        #expect(work.subscribers("a") == 0)
        // A later caller starts afresh.
        loader.script("a", .bytes(Data("22".utf8)))
        #expect(try await work.run("a") { try await loader.load(source).data.count }.0 == 2)
    }
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var out: [T] = []
        for element in self { out.append(try await transform(element)) }
        return out
    }
}
