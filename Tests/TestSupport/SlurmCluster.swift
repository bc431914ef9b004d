import Foundation

/// A real Slurm cluster of one node on loopback for tests: munged, slurmctld and slurmd from
/// Debian (installed by `make test`), started as daemons by `slurm-cluster.sh` under a temporary
/// directory with their own munge key and `slurm.conf`, on free ports. Clients (`sbatch`, `squeue`) reach it through
/// ``environment`` (`SLURM_CONF`). ``stop()`` ends all three.
public final class SlurmCluster: @unchecked Sendable {
    public let directory: URL

    /// The environment a client command needs, added to this process's.
    public var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["SLURM_CONF"] = directory.appendingPathComponent("slurm.conf").path
        return environment
    }

    private init(directory: URL) { self.directory = directory }

    /// Starts the daemons and waits until the node is idle (bounded: 60 s).
    public static func start(cpus: Int = 2) async throws -> SlurmCluster {
        for tool in ["munged", "slurmctld", "slurmd", "sbatch"] where which(tool) == nil {
            throw CommandError(message: "\(tool) is not installed (make test installs slurmctld, slurmd, slurm-client and munge)")
        }
        let dir = try Fixtures.temporaryDirectory("slurm")
        for sub in ["state", "spool", "log"] {
            try FileManager.default.createDirectory(at: dir.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: dir.path)
        let key = dir.appendingPathComponent("munge.key")
        var bytes = [UInt8](repeating: 0, count: 128)
        for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
        try Data(bytes).write(to: key)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: key.path)
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "localhost"
        let socket = dir.appendingPathComponent("munge.sock").path
        let script = Self.script
        let path = { (name: String) in dir.appendingPathComponent(name).path }
        try """
            ClusterName=pipelinectl-test
            SlurmctldHost=\(host)(127.0.0.1)
            SlurmUser=root
            SlurmdUser=root
            AuthType=auth/munge
            AuthInfo=socket=\(socket)
            CredType=cred/munge
            SlurmctldPort=\(try MotoServer.freePort())
            SlurmdPort=\(try MotoServer.freePort())
            StateSaveLocation=\(path("state"))
            SlurmdSpoolDir=\(path("spool"))
            SlurmctldPidFile=\(path("slurmctld.pid"))
            SlurmdPidFile=\(path("slurmd.pid"))
            SlurmctldLogFile=\(path("log/slurmctld.log"))
            SlurmdLogFile=\(path("log/slurmd.log"))
            ProctrackType=proctrack/linuxproc
            TaskPlugin=task/none
            JobAcctGatherType=jobacct_gather/none
            AccountingStorageType=accounting_storage/none
            JobCompType=jobcomp/none
            SchedulerType=sched/backfill
            SelectType=select/cons_tres
            SelectTypeParameters=CR_Core
            ReturnToService=2
            MpiDefault=none
            SwitchType=switch/none
            MinJobAge=600
            NodeName=\(host) NodeAddr=127.0.0.1 CPUs=\(cpus) RealMemory=4000 State=UNKNOWN
            PartitionName=test Nodes=\(host) Default=YES MaxTime=INFINITE State=UP

            """.write(to: dir.appendingPathComponent("slurm.conf"), atomically: true, encoding: .utf8)
        let result = try await Command.run(script, ["start", dir.path])
        guard result.status == 0 else {
            _ = try? await Command.run(script, ["stop", dir.path])
            throw CommandError(message: "Slurm did not start: \(result.stderr)")
        }
        return SlurmCluster(directory: dir)
    }

    /// Stops slurmd, slurmctld and munged (in that order): the stop script runs on its own and
    /// this returns at once, so that a test's `defer` never holds one of the few threads of
    /// Swift's cooperative pool that every other test running at the same time needs.
    public func stop() {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.script)
        process.arguments = ["stop", directory.path]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try? process.runSerialized()
    }

    static var script: String { Fixtures.packageRoot.appendingPathComponent("Tests/TestSupport/slurm-cluster.sh").path }

    /// The full path of `tool` on PATH (and the sbin directories Debian puts daemons in).
    public static func which(_ tool: String) -> String? {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "") + ":/usr/sbin:/sbin:/usr/bin"
        return path.split(separator: ":").map { "\($0)/\(tool)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }
}
