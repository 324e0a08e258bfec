import ConciergeCore
import Foundation
import NIOCore

/// A proxy listener's Unix socket file (`listen.proxy[]` with `unix:/path`).
///
/// No moment with looser permissions: the socket is bound inside a fresh directory that only
/// the daemon's user can enter (`mkdtemp`, 0700), given its `mode` and `group` there, and only
/// then renamed to its path (one atomic step, replacing a socket a previous run left behind).
/// At shutdown the file is removed, unless something else has replaced it since.
struct UnixSocketFile: Sendable {
    let path: String
    let mode: UInt32
    /// `nil`: the daemon's group.
    let group: UInt32?

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// The file the daemon put at ``path``, so that shutdown removes that one only.
    struct Placed: Sendable {
        var device: UInt64
        var inode: UInt64
    }

    /// Binds through `bind` (given the path to bind at), sets the mode and group, moves the
    /// socket to ``path``. The channel is closed again when a step fails.
    func bind(_ bind: (String) async throws -> any Channel) async throws -> (any Channel, Placed) {
        try checkPath()
        let directory = (path as NSString).deletingLastPathComponent
        var template = Array((directory + "/.cXXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw Failure(description: "cannot create a directory in \(directory): \(Self.errnoText())") }
        let privateDirectory = String(cString: made)
        defer { rmdir(privateDirectory) }
        let temporary = privateDirectory + "/s"
        let channel = try await bind(temporary)
        do {
            let placed = try place(temporary)
            return (channel, placed)
        } catch {
            unlink(temporary)
            try? await channel.close()
            throw error
        }
    }

    /// Refuses to replace anything but a socket (a configuration naming `/etc/passwd`).
    private func checkPath() throws {
        var existing = stat()
        guard lstat(path, &existing) == 0 else { return }
        guard existing.st_mode & S_IFMT == S_IFSOCK else {
            throw Failure(description: "\(path) exists and is not a socket")
        }
    }

    private func place(_ temporary: String) throws -> Placed {
        guard chmod(temporary, mode_t(mode)) == 0 else { throw Failure(description: "chmod 0\(String(mode, radix: 8)) \(path): \(Self.errnoText())") }
        if let group, group != getegid() {
            guard chown(temporary, uid_t.max, gid_t(group)) == 0 else {
                throw Failure(description: "cannot give \(path) to group \(group) (\(Self.errnoText())): the daemon must be a member of it or run as root")
            }
        }
        var status = stat()
        guard stat(temporary, &status) == 0 else { throw Failure(description: "stat \(temporary): \(Self.errnoText())") }
        guard rename(temporary, path) == 0 else { throw Failure(description: "cannot move the socket to \(path): \(Self.errnoText())") }
        return Placed(device: UInt64(status.st_dev), inode: UInt64(status.st_ino))
    }

    /// Removes the socket file if it is still the one ``bind(_:)`` placed.
    func remove(_ placed: Placed) {
        var status = stat()
        guard lstat(path, &status) == 0, UInt64(status.st_dev) == placed.device, UInt64(status.st_ino) == placed.inode else { return }
        unlink(path)
    }

    private static func errnoText() -> String {
        String(cString: strerror(errno))
    }
}
