import Foundation
@testable import PipelineKit
import Testing

/// The default number of workers and jobs: the CPUs the process may use, not the machine's.
@Suite struct UsableCoresTests {
    @Test func theSmallestKnownLimitWins() {
        #expect(UsableCores.resolve(affinity: 2, quota: nil, machine: 64) == 2)
        #expect(UsableCores.resolve(affinity: 64, quota: 3, machine: 64) == 3)
        #expect(UsableCores.resolve(affinity: 0, quota: nil, machine: 8) == 8)  // mask unknown
        #expect(UsableCores.resolve(affinity: -1, quota: 4, machine: 8) == 4)
        #expect(UsableCores.resolve(affinity: 0, quota: nil, machine: 0) == 1)
    }

    @Test func cgroupV2CPUMaxIsRoundedUp() {
        #expect(UsableCores.cores(cpuMax: "max 100000\n") == nil)
        #expect(UsableCores.cores(cpuMax: "200000 100000\n") == 2)
        #expect(UsableCores.cores(cpuMax: "150000 100000") == 2)
        #expect(UsableCores.cores(cpuMax: "50000 100000") == 1)
        #expect(UsableCores.cores(cpuMax: "") == nil)
        #expect(UsableCores.cores(cpuMax: "garbage") == nil)
    }

    @Test func cgroupV1QuotaIsRoundedUp() {
        #expect(UsableCores.cores(quotaMicroseconds: "-1\n", periodMicroseconds: "100000\n") == nil)
        #expect(UsableCores.cores(quotaMicroseconds: "250000\n", periodMicroseconds: "100000\n") == 3)
        #expect(UsableCores.cores(quotaMicroseconds: "x", periodMicroseconds: "100000") == nil)
        #expect(UsableCores.cores(quotaMicroseconds: "100000", periodMicroseconds: "0") == nil)
    }

    /// A cgroup tree on disk: the tightest quota of the process's group and its ancestors counts,
    /// under v2 and under v1's "cpu,cpuacct" mount.
    @Test func theTightestQuotaOverTheGroupAndItsAncestors() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("cgroup-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        func write(_ path: String, _ text: String) throws {
            let file = root.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            try text.write(to: file, atomically: true, encoding: .utf8)
        }
        try write("cpu.max", "max 100000\n")
        try write("kubepods/cpu.max", "400000 100000\n")
        try write("kubepods/pod1/cpu.max", "max 100000\n")
        try write("kubepods/pod1/app/cpu.max", "max 100000\n")
        #expect(UsableCores.cgroupQuota(root: root.path, membership: "0::/kubepods/pod1/app\n") == 4)
        try write("kubepods/pod1/app/cpu.max", "150000 100000\n")
        #expect(UsableCores.cgroupQuota(root: root.path, membership: "0::/kubepods/pod1/app\n") == 2)
        #expect(UsableCores.cgroupQuota(root: root.path, membership: "0::/elsewhere\n") == nil)

        try write("cpu,cpuacct/docker/c1/cpu.cfs_quota_us", "300000\n")
        try write("cpu,cpuacct/docker/c1/cpu.cfs_period_us", "100000\n")
        try write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
        try write("cpu,cpuacct/cpu.cfs_period_us", "100000\n")
        #expect(UsableCores.cgroupQuota(root: root.path, membership: "4:memory:/docker/c1\n3:cpu,cpuacct:/docker/c1\n0::/\n") == 3)
        #expect(UsableCores.cgroupQuota(root: root.path, membership: "3:cpu,cpuacct:/\n") == nil)
        #expect(UsableCores.cgroupQuota(root: root.path, membership: "not a cgroup file") == nil)
    }

    /// This process: never more than the CPUs its affinity mask allows.
    @Test func thisProcessCountsItsMask() {
        let allowed = WorkerPoolPriorityTests.allowedCPUs().count
        #expect(UsableCores.count >= 1)
        #expect(UsableCores.count <= max(1, allowed))
    }
}
