import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A throwaway certificate authority made inside the test (P-256, valid for a day) and a
/// server certificate it signed for `localhost` and `127.0.0.1`: the CA's PEM is what an
/// upstream's `ca_file` points at, the server context what a TLS test upstream serves.
struct TestCertificateAuthority {
    let caPEM: String
    let serverContext: NIOSSLContext

    init(commonName: String = "Concierge Test CA") throws {
        let now = Date()
        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName { CommonName(commonName) }
        let ca = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(caKey.publicKey),
            notValidBefore: now - 3600, notValidAfter: now + 86400, issuer: caName, subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(caKey))
        let serverKey = P256.Signing.PrivateKey()
        let server = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(serverKey.publicKey),
            notValidBefore: now - 3600, notValidAfter: now + 86400, issuer: caName,
            subject: try DistinguishedName { CommonName("localhost") },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))])
            },
            issuerPrivateKey: .init(caKey))
        caPEM = try ca.serializeAsPEM().pemString
        let chain = try NIOSSLCertificate(bytes: Array(server.serializeAsPEM().pemString.utf8), format: .pem)
        let key = try NIOSSLPrivateKey(bytes: Array(serverKey.pemRepresentation.utf8), format: .pem)
        serverContext = try NIOSSLContext(configuration: .makeServerConfiguration(certificateChain: [.certificate(chain)], privateKey: .privateKey(key)))
    }

    /// Writes the CA certificate to a new file in `directory` and returns its path.
    func writeCA(in directory: String) throws -> String {
        let path = directory + "/test-ca-\(UUID().uuidString).pem"
        try caPEM.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}
