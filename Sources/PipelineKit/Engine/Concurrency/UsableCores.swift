import CLinux
import Foundation

/// How many CPUs this process can keep busy: the default number of workers (`run`, `work`,
/// `serve`) and of `serve`'s jobs.
///
/// Foundation's `activeProcessorCount` counts the machine's CPUs on Linux, whatever the process
/// is allowed: under `taskset -c 0`, in a container with `--cpuset-cpus` or `--cpus`, or in a
/// Kubernetes pod with a CPU limit, it still gives every core of the node, and a 64-core node would
/// start 64 workers for a pod allowed two. This takes the smallest of: the CPUs in the process's
/// affinity mask, its cgroup's CPU quota (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us` over
/// `cpu.cfs_period_us`, rounded up: 1.5 CPUs of quota keep two workers), and the machine's count.
public enum UsableCores {
    /// The count for this process, read once.
    public static let count: Int = resolve(
        affinity: Int(pk_allowed_cpus()),
        quota: cgroupQuota(),
        machine: ProcessInfo.processInfo.activeProcessorCount)

    /// The smallest of the known limits, at least 1. `affinity` of 0 or less, or `nil` `quota`:
    /// unknown, not a limit.
    public static func resolve(affinity: Int, quota: Int?, machine: Int) -> Int {
        var cores = max(1, machine)
        if affinity > 0 { cores = min(cores, affinity) }
        if let quota { cores = min(cores, quota) }
        return max(1, cores)
    }

    /// CPUs granted by a cgroup v2 `cpu.max` line ("QUOTA PERIOD", or "max PERIOD": no limit),
    /// rounded up; `nil` when it sets no limit or cannot be read.
    public static func cores(cpuMax: String) -> Int? {
        let fields = cpuMax.split(whereSeparator: \.isWhitespace)
        guard fields.count >= 1, fields[0] != "max", let quota = Double(fields[0]) else { return nil }
        let period = fields.count >= 2 ? Double(fields[1]) ?? 100_000 : 100_000
        return cores(quota: quota, period: period)
    }

    /// CPUs granted by cgroup v1's `cpu.cfs_quota_us` (-1: no limit) and `cpu.cfs_period_us`,
    /// rounded up; `nil` when they set no limit or cannot be read.
    public static func cores(quotaMicroseconds: String, periodMicroseconds: String) -> Int? {
        guard let quota = Double(quotaMicroseconds.trimmingCharacters(in: .whitespacesAndNewlines)),
              let period = Double(periodMicroseconds.trimmingCharacters(in: .whitespacesAndNewlines)) else { return nil }
        return cores(quota: quota, period: period)
    }

    private static func cores(quota: Double, period: Double) -> Int? {
        guard quota > 0, period > 0 else { return nil }
        return max(1, Int((quota / period).rounded(.up)))
    }

    /// The tightest CPU quota over this process's cgroup and its ancestors (a limit set on a
    /// parent holds for its children), under cgroup v2 or v1; `nil` when none is set.
    static func cgroupQuota(root: String = "/sys/fs/cgroup", membership: String? = nil) -> Int? {
        guard let membership = membership ?? (try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8)) else { return nil }
        var found: [Int] = []
        for line in membership.split(separator: "\n") {
            // "ID:CONTROLLERS:PATH"; v2's line is "0::PATH".
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { continue }
            let controllers = parts[1].split(separator: ",")
            let path = String(parts[2])
            if parts[0] == "0" && controllers.isEmpty {
                found += ancestors(of: path).compactMap { directory in
                    read("\(root)\(directory)/cpu.max").flatMap { cores(cpuMax: $0) }
                }
            } else if controllers.contains("cpu") {
                // The v1 hierarchy is mounted under its controllers' names ("cpu,cpuacct"), often
                // with a "cpu" link to it; in a container the process's path is often the mount's root.
                for mount in Set(["\(root)/\(parts[1])", "\(root)/cpu"]) {
                    found += ancestors(of: path).compactMap { directory in
                        guard let quota = read("\(mount)\(directory)/cpu.cfs_quota_us"),
                              let period = read("\(mount)\(directory)/cpu.cfs_period_us") else { return nil }
                        return cores(quotaMicroseconds: quota, periodMicroseconds: period)
                    }
                }
            }
        }
        return found.min()
    }

    /// "/a/b" -> ["/a/b", "/a", ""] (the last is the hierarchy's root).
    private static func ancestors(of path: String) -> [String] {
        var parts = path.split(separator: "/").map(String.init)
        var all: [String] = []
        while true {
            all.append(parts.isEmpty ? "" : "/" + parts.joined(separator: "/"))
            if parts.isEmpty { return all }
            parts.removeLast()
        }
    }

    private static func read(_ path: String) -> String? {
        try? String(contentsOfFile: path, encoding: .utf8)
    }
}
