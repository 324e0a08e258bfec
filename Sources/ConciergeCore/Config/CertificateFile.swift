import Foundation

/// Vets a PEM file of trusted certificates (`upstreams.<name>.ca_file`) when the
/// configuration is loaded, so a wrong path is a config error (78) rather than a failed
/// TLS handshake on the first request.
public enum CertificateFile {
    /// Larger than any sensible CA bundle; keeps the loader from reading a huge file.
    static let maxBytes = 4 << 20

    /// Why the file cannot serve as trust roots, or nil when it can.
    public static func problem(at path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            return errno == ENOENT ? "CA file \(path) does not exist" : "CA file \(path) cannot be read: \(String(cString: strerror(errno)))"
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else { return "CA file \(path) is not a regular file" }
        guard Int(info.st_size) <= maxBytes else { return "CA file \(path) is larger than \(maxBytes) bytes" }
        guard let data = FileManager.default.contents(atPath: path) else {
            return "CA file \(path) cannot be read: \(access(path, R_OK) == 0 ? "read failed" : String(cString: strerror(errno)))"
        }
        guard String(decoding: data, as: UTF8.self).contains("-----BEGIN CERTIFICATE-----") else {
            return "CA file \(path) holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        }
        return nil
    }
}
